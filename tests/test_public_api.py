"""Privlm.training, privlm.prompting and privlm.predict export the functions the
CLI calls; every exported name resolves, and importing the packages stays cheap."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

pytestmark = pytest.mark.fast


@pytest.mark.parametrize(
    "package", ["privlm.training", "privlm.prompting", "privlm.predict", "privlm.synth"]
)
def test_every_exported_name_resolves(package):
    module = importlib.import_module(package)
    assert module.__all__
    for name in module.__all__:
        assert getattr(module, name) is not None, f"{package}.{name}"
    with pytest.raises(AttributeError):
        module.no_such_name  # noqa: B018


def test_the_cli_builds_the_exported_configs_and_calls_the_exported_functions():
    """The CLI reads its settings from the torch-free config modules, which are the classes
    the packages export, and imports the training code (the same functions) when it runs."""
    import inspect

    from privlm import predict, prompting, training
    from privlm.cli import predict as predict_cli
    from privlm.cli import prompt, train

    assert train.DpSgdConfig is training.DpSgdConfig and train.JftConfig is training.JftConfig
    assert prompt.PromptPateConfig is prompting.PromptPateConfig
    from privlm.predict.mechanisms import mechanism

    assert mechanism("pmixed").config is predict.PMixEDConfig  # what the CLI's options read
    assert predict_cli.mechanism_options
    assert "from privlm.training.dpsgd import" in inspect.getsource(train.dpsgd)
    assert "from privlm.prompting.pate_pipeline import" in inspect.getsource(prompt.pate)


def test_importing_the_training_and_prompting_packages_loads_no_torch():
    code = "import sys, privlm.training, privlm.prompting; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_every_entry_point_takes_a_name_or_a_loaded_model():
    import typing

    from privlm import prompting, training
    from privlm.models import ModelSource

    for fn in (training.train_dpsgd, training.train_jft, training.train_ensemble,
               prompting.train_prompt_dpsgd, prompting.run_prompt_pate):  # fmt: skip
        first = next(iter(typing.get_type_hints(fn).values()))
        assert first == ModelSource, fn.__name__
