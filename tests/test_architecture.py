"""The layering of docs/architecture.md, enforced: each layer imports only those below it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "privlm"
BASE = {
    "errors", "settings", "fsutil", "progress", "randomness", "extras", "lazy", "config", "curator"
}  # fmt: skip
ALLOWED = {
    "errors": set(),
    "settings": {"errors"},
    "fsutil": set(),
    "progress": set(),
    "randomness": set(),
    "extras": {"errors"},
    "lazy": set(),
    "config": {"errors"},
    "curator": {"fsutil"},
    "perturb": BASE | {"perturb"},
    "accounting": {"errors", "extras", "accounting"},
    "data": BASE | {"data"},
    "models": BASE | {"models"},
    "detect": BASE | {"data", "detect"},
    "training": BASE | {"accounting", "data", "detect", "models", "training"},
    "predict": BASE | {"accounting", "data", "models", "training", "predict"},
    "prompting": BASE | {"accounting", "data", "models", "training", "prompting"},
    "audit": BASE
    | {"accounting", "data", "detect", "models", "training", "predict", "prompting", "audit"},
}
FORBIDDEN_IN_ACCOUNTING = {"torch", "transformers", "peft"}
FORBIDDEN_IN_DETECT = {"torch", "transformers", "peft"}  # a detector sees text only
FORBIDDEN_IN_PERTURB = {"torch", "transformers", "peft"}  # runs as plain numpy, like the page


def layer_of(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0].removesuffix(".py")


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


MODULES = [p for p in SRC.rglob("*.py") if layer_of(p) in ALLOWED]


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_layer_imports_only_what_it_may(path):
    layer = layer_of(path)
    used = {
        m.split(".")[1] for m in imports(path) if m.startswith("privlm.") and len(m.split(".")) > 1
    }
    bad = used - ALLOWED[layer]
    assert not bad, f"{path.relative_to(SRC)} ({layer}) imports {sorted(bad)}"
    if layer == "accounting":
        heavy = {m.split(".")[0] for m in imports(path)} & FORBIDDEN_IN_ACCOUNTING
        assert not heavy, f"accounting must stay free of {sorted(heavy)}"
    if layer == "detect":
        heavy = {m.split(".")[0] for m in imports(path)} & FORBIDDEN_IN_DETECT
        assert not heavy, f"detect must stay free of {sorted(heavy)}"
    if layer == "perturb":
        heavy = {m.split(".")[0] for m in imports(path)} & FORBIDDEN_IN_PERTURB
        assert not heavy, f"perturb must stay free of {sorted(heavy)}"


def test_nothing_imports_the_cli():
    for path in SRC.rglob("*.py"):
        if layer_of(path) not in ("cli", "__main__"):  # python -m privlm is the CLI
            assert not any(m.startswith("privlm.cli") for m in imports(path)), path
