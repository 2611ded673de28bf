"""Issue 13 §1: each job's settings are defined once, in its config class; the CLI's options
and the service's request models take their defaults (and bounds) from it. These tests walk
every job command and request model, so a default restated by hand that drifts fails."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import BaseModel

from privlm.cli import load_command
from privlm.config import setting, settings_of
from privlm.errors import PrivlmError
from privlm.predict.pmixed import PMixEDConfig
from privlm.predict.submix import SubMixConfig
from privlm.prompting.pate_pipeline import PromptPateConfig
from privlm.prompting.prompt_dpsgd import PromptDpSgdConfig
from privlm.service.deployments import DeploymentParams
from privlm.service.jobs import (
    DpSgdParams,
    EnsembleParams,
    JftParams,
    PateParams,
    PromptDpSgdParams,
)
from privlm.training.dpsgd import DpSgdConfig
from privlm.training.ensemble import EnsembleConfig
from privlm.training.jft import JftConfig
from privlm.training.lora_finetune import LoraTrainingConfig

# (command path, config classes in priority order, CLI parameter -> setting where renamed)
COMMANDS = [
    (("train", "dpsgd"), [DpSgdConfig], {"epsilon": "target_epsilon"}),
    (("train", "jft"), [JftConfig, DpSgdConfig],
     {"epsilon": "target_epsilon", "phase1_lr": "phase1_learning_rate"}),
    (("ensemble", "train"), [EnsembleConfig, LoraTrainingConfig], {}),
    (("generate",), [PMixEDConfig], {}),
    (("eval", "ppl"), [PMixEDConfig], {}),
    (("prompt", "dpsgd"), [PromptDpSgdConfig], {"epsilon": "target_epsilon"}),
    (("prompt", "pate"), [PromptPateConfig], {"candidates": "student_candidates"}),
]  # fmt: skip
# parameters whose default is deliberately not a config setting, with the reason
NOT_SETTINGS = {
    "epsilon": "generate/eval ppl: the mechanism's own default (PMixED 8, SubMix 2)",
    "alpha": "generate/eval ppl: the mechanism's own default (PMixED 3, SubMix 2)",
    "beta": "ε/T of the deployment's own ε and T (SubMixConfig's 2/1024 at the defaults)",
}
REQUESTS = [
    (DpSgdParams, [DpSgdConfig], {"epsilon": "target_epsilon"}),
    (JftParams, [JftConfig, DpSgdConfig], {"epsilon": "target_epsilon"}),
    (EnsembleParams, [EnsembleConfig, LoraTrainingConfig], {}),
    (PateParams, [PromptPateConfig], {}),
    (PromptDpSgdParams, [PromptDpSgdConfig], {"epsilon": "target_epsilon", "prompt_kind": "kind"}),
    (DeploymentParams, [PMixEDConfig, SubMixConfig], {}),
]  # fmt: skip


def command(path: tuple[str, ...]):
    cmd = load_command(path[0])
    for name in path[1:]:
        cmd = cmd.commands[name]
    return cmd


def find_setting(classes, name):
    for cls in classes:
        if name in settings_of(cls):
            return cls, settings_of(cls)[name]
    return None, None


@pytest.mark.parametrize(("path", "classes", "renamed"), COMMANDS, ids=lambda v: str(v))
def test_every_cli_default_is_its_config_default(path, classes, renamed):
    checked = 0
    for param in command(path).params:
        cls, s = find_setting(classes, renamed.get(param.name, param.name))
        if s is None:
            continue
        if (path[0] in ("generate", "eval")) and param.name in NOT_SETTINGS:
            assert param.default is None, NOT_SETTINGS[param.name]
            continue
        assert param.default == s.default, f"{' '.join(path)} --{param.name}: {cls.__name__}"
        checked += 1
    assert checked >= 2


@pytest.mark.parametrize(("model", "classes", "renamed"), REQUESTS, ids=lambda v: str(v))
def test_every_service_default_is_its_config_default(model: type[BaseModel], classes, renamed):
    checked = 0
    for name, info in model.model_fields.items():
        cls, s = find_setting(classes, renamed.get(name, name))
        if s is None or (model is DeploymentParams and name in NOT_SETTINGS):
            continue
        assert info.default == s.default, f"{model.__name__}.{name}: {cls.__name__}"
        assert info.description == s.help
        checked += 1
    assert checked >= 2


def test_the_drifted_defaults_are_one_value_now():
    assert DpSgdParams().batch_size == DpSgdConfig().batch_size == 64
    ens = EnsembleParams()
    assert (ens.epochs, ens.block_size) == (
        LoraTrainingConfig().epochs,
        LoraTrainingConfig().block_size,
    )
    dep = DeploymentParams(job_id="j").resolved()
    assert (dep.sample_rate, dep.queries) == (PMixEDConfig().sample_rate, PMixEDConfig().queries)
    assert (dep.epsilon, dep.alpha) == (PMixEDConfig().epsilon, PMixEDConfig().alpha)
    sub = DeploymentParams(job_id="j", mechanism="submix").resolved()
    assert (sub.epsilon, sub.alpha) == (SubMixConfig().epsilon, SubMixConfig().alpha)
    from privlm.predict.factory import submix_config

    assert submix_config(sub.eps, sub.rdp_order, None, sub.queries, sub.delta) == SubMixConfig()


def config_classes() -> list[type]:
    """Every config class in privlm (a dataclass with a setting), found by walking the
    package, so that a new one is checked without being listed here."""
    import importlib
    import pkgutil

    import privlm

    found: dict[str, type] = {}
    for info in pkgutil.walk_packages(privlm.__path__, "privlm."):
        if ".cli" in info.name or info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if (isinstance(obj, type) and dataclasses.is_dataclass(obj)
                    and obj.__module__ == module.__name__ and settings_of(obj)):  # fmt: skip
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return [found[k] for k in sorted(found)]


def outside(bound: str, limit: float, is_int: bool) -> float:
    """A value just outside a bound: at a strict one, beyond a closed one."""
    step = 1 if is_int else max(abs(limit) * 1e-3, 1e-9)
    return {"gt": limit, "lt": limit, "ge": limit - step, "le": limit + step}[bound]


def test_every_config_class_refuses_every_bound_where_it_is_built():
    """Each declared bound (strict ones included) is enforced by the constructor itself, in
    the library, so the CLI and the service inherit it; the message names the setting."""
    classes = config_classes()
    assert {PMixEDConfig, SubMixConfig, DpSgdConfig, PromptPateConfig} <= set(classes)
    checked = 0
    for cls in classes:
        for s in settings_of(cls).values():
            for bound, limit in s.bounds.items():
                is_int = isinstance(s.default, int) and not isinstance(s.default, bool)
                bad = outside(bound, limit, is_int)
                with pytest.raises(PrivlmError, match=rf"\b{s.name} must"):
                    cls(**{s.name: int(bad) if is_int else bad})
                checked += 1
            if s.choices:
                with pytest.raises(PrivlmError, match=rf"\b{s.name} must be one of"):
                    cls(**{s.name: "no-such-choice"})
    assert checked > 40


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["--delta", "2.0"], "'--delta': must be less than 1"),
        (["--delta", "0"], "'--delta': must be greater than 0"),
        (["--epsilon", "-1"], "'--epsilon': must be greater than 0"),
        (["--sample-rate", "1.5"], "'--sample-rate': must be at most 1"),
    ],
)
def test_strict_bounds_reach_the_cli(args, why):
    from typer.testing import CliRunner

    from privlm.cli import app

    res = CliRunner().invoke(app, ["plan", "pmixed", *args])
    assert res.exit_code == 2 and why in res.output.replace("\n", " "), res.output


def test_a_setting_copies_mutable_defaults():
    @dataclasses.dataclass
    class Demo:
        names: list[str] = setting(["a"], "names")  # noqa: RUF009

    one, two = Demo(), Demo()
    one.names.append("b")
    assert two.names == ["a"]
