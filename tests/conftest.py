"""Shared fixtures. Tests use the ``tiny`` model; real-model checks are marked ``slow``."""

from __future__ import annotations

import os

import pytest

from privlm.data import corpora

# The CPU suite is defined on the CPU in float32, also on a machine with a GPU; the GPU tests
# (tests/gpu, make test-gpu) name their device explicitly.
os.environ.setdefault("PRIVLM_DEVICE", "cpu")


@pytest.fixture(scope="session")
def tiny():
    from privlm.models import load_public_model

    return load_public_model("tiny")


requires_data = pytest.mark.skipif(
    not all(corpora.available().values()),
    reason="the bundled corpora (PRIVLM_DATA or ../shared/data) are not present",
)


# The fast loop (`make fast`): the tests that load no model, train nothing and start no
# server. They are chosen by place; the loop then checks the choice: it fails if, while the
# tests ran, a module that loads a model, trains or serves was imported, or one that was
# already imported (the single-source test reads the service's and the CLI's declarations)
# had its entry point called (docs/architecture.md, "Tests").
FAST_PATHS = (
    "tests/accounting/",
    "tests/data/",
    "tests/detect/",
    "tests/perturb/",
    "tests/test_architecture.py",
    "tests/test_config_single_source.py",
    "tests/test_extras.py",
    "tests/test_progress.py",
    "tests/test_randomness.py",
)
HEAVY = {  # module: its entry point
    "privlm.models.loading": "load_public_model",  # every model, tiny included
    "privlm.training.lora_finetune": "lora_model",  # every LoRA training path
    "privlm.prompting.prompt_dpsgd": "prompt_model",  # prompt training
    "privlm.service.app": "create_app",  # the web service
}
_heavy_calls: list[str] = []
_imported_at_collection: set[str] = set()


def pytest_collection_modifyitems(config, items):
    root = str(config.rootpath)
    for item in items:
        path = str(item.path).removeprefix(root + "/")
        if path.startswith(FAST_PATHS):
            item.add_marker(pytest.mark.fast)


def _fast_loop() -> bool:
    return os.environ.get("PRIVLM_FAST_LOOP") == "1"


def pytest_collection_finish(session):
    if not _fast_loop():
        return
    import functools
    import sys

    for name, entry in HEAVY.items():
        module = sys.modules.get(name)
        if module is None:
            continue
        _imported_at_collection.add(name)
        original = getattr(module, entry)

        @functools.wraps(original)
        def recorded(*args, _where=f"{name}.{entry}", _original=original, **kwargs):
            _heavy_calls.append(_where)
            return _original(*args, **kwargs)

        setattr(module, entry, recorded)


def pytest_sessionfinish(session, exitstatus):
    if not _fast_loop():
        return
    import sys

    late = [m for m in HEAVY if m in sys.modules and m not in _imported_at_collection]
    if late or _heavy_calls:
        session.exitstatus = 1
        sys.stderr.write(
            f"\nthe fast loop imported {late} and called {sorted(set(_heavy_calls))}: a test "
            "in FAST_PATHS (tests/conftest.py) loads a model, trains or serves; move it out\n"
        )
