"""The fast loop's guard: while a test marked ``fast`` is set up or runs, constructing a
Hugging Face model (every model, the tiny one included, from a checkpoint or a config), an
optimizer (every training loop), a FastAPI app or a uvicorn server raises.

It sits on those classes' constructors, so no import path avoids it, and it is installed
before any test module is imported (``tests/conftest.py``'s ``pytest_configure``). A child
Python process a fast test starts gets it too: the test's id is in ``PRIVLM_FAST_TEST`` and
this folder's ``sitecustomize`` installs the guard in the child, patching each class when
its module is first imported.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Callable
from typing import Any

ENV = "PRIVLM_FAST_TEST"
GUARDED = {  # module: (class, what constructing one means)
    "transformers.modeling_utils": ("PreTrainedModel", "loads a model"),
    "torch.optim.optimizer": ("Optimizer", "trains"),
    "fastapi.applications": ("FastAPI", "builds the web service"),
    "uvicorn.server": ("Server", "starts a server"),
}


class HeavyInFastTest(AssertionError):
    """A test marked fast loaded a model, trained or started a server."""


def _guard(module: Any, name: str, what: str, current: Callable[[], str | None]) -> None:
    cls = getattr(module, name)
    if getattr(cls.__init__, "_privlm_fast_guard", False):
        return
    original = cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        test = current()
        if test:
            raise HeavyInFastTest(
                f"{test} is marked fast but {what} ({cls.__module__}.{cls.__qualname__}): "
                "move it out of the fast loop"
            )
        original(self, *args, **kwargs)

    __init__._privlm_fast_guard = True  # type: ignore[attr-defined]
    cls.__init__ = __init__


class _AfterImport(importlib.abc.MetaPathFinder):
    """Guards a module's class as soon as the module is imported."""

    def __init__(self, current: Callable[[], str | None]) -> None:
        self.current = current

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in GUARDED:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        loader, current = spec.loader, self.current
        run = loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            name, what = GUARDED[fullname]
            _guard(module, name, what, current)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install(current: Callable[[], str | None]) -> None:
    """Guard the classes: now where their modules are imported, else when they are."""
    for module_name, (name, what) in GUARDED.items():
        module = sys.modules.get(module_name)
        if module is not None:
            _guard(module, name, what, current)
    if not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(current))


def install_from_environment() -> None:
    """In a child process: guard while the parent's fast test is named in the environment."""
    if os.environ.get(ENV):
        install(lambda: os.environ.get(ENV))
