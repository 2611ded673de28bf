"""A command that needs a missing extra says which ``pip install`` to run."""

from __future__ import annotations

import importlib.util

import pytest

from privlm import extras
from privlm.errors import PrivlmError

pytestmark = pytest.mark.fast


def test_a_missing_extra_names_the_pip_install_line(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        extras.importlib.util, "find_spec", lambda m: None if m == "uvicorn" else real(m)
    )
    with pytest.raises(PrivlmError, match=r"pip install 'privlm\[service\]'") as e:
        extras.require("service", "the service")
    assert "uvicorn not installed" in str(e.value)
    extras.require("ray", "--ray")  # installed: no error


def test_every_extra_is_declared_in_the_package_metadata():
    import tomllib
    from pathlib import Path

    declared = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert set(extras.EXTRAS) <= set(declared["project"]["optional-dependencies"])
