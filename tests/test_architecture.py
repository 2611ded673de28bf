"""The layering of docs/architecture.md, enforced: each layer imports only those below it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

SRC = Path(__file__).resolve().parents[1] / "src" / "privlm"
BASE = {
    "errors", "settings", "fsutil", "progress", "randomness", "extras", "lazy", "config", "curator",
    "quiet",
}  # fmt: skip
LOWER = ("accounting", "data", "detect", "models")
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
    "quiet": set(),
    "perturb": BASE | {"perturb"},
    "accounting": {"errors", "extras", "lazy", "accounting"},
    "data": BASE | {"data"},
    "models": BASE | {"models"},
    "detect": BASE | {"data", "detect"},
    "training": BASE | {"accounting", "data", "detect", "models", "training"},
    "predict": BASE | {"accounting", "data", "models", "training", "predict"},
    "prompting": BASE | {"accounting", "data", "models", "training", "prompting"},
    "synth": BASE | {"accounting", "data", "detect", "models", "predict", "training", "synth"},
    "audit": BASE
    | {"accounting", "data", "detect", "models", "training", "predict", "prompting", "audit"},
    "service": BASE
    | set(LOWER)
    | {"perturb", "training", "predict", "prompting", "synth", "service"},
    "cli": BASE
    | set(LOWER)
    | {"perturb", "training", "predict", "prompting", "synth", "audit", "service", "cli"},
    "__init__": {"errors", "quiet"},  # the error types, and the third-party log filters
    "__main__": {"cli"},
}
# docs/architecture.md: prediction reads training's adapter manifests, nothing else of it
NARROW = {("predict", "training"): {"privlm.training.manifest"}}
FORBIDDEN_IN_ACCOUNTING = {"torch", "transformers", "peft"}
FORBIDDEN_IN_DETECT = {"torch", "transformers", "peft"}  # a detector sees text only
# ... but the learned tagger reads the public model's features: it alone may use models,
# and it, its int8 layers and its fixed-shape products (imported by the tagger only) may use
# torch, and nothing else of the forbidden
TAGGER = "detect/tagger.py"
TAGGER_MAY = {"models"}
TORCH_IN_DETECT = {TAGGER, "detect/int8.py", "detect/fixed_rows.py"}
FORBIDDEN_IN_PERTURB = {"torch", "transformers", "peft"}  # runs as plain numpy, like the page
# modules that import by computed name, and what they may reach that way
DYNAMIC = {
    "lazy.py": "a package's own submodules (its EXPORTS, checked below)",
    "cli/__init__.py": "privlm.cli's own command modules",
    "predict/mechanisms.py": "each registered mechanism's builder, by its import path (checked below)",
    "service/job_kinds.py": "each registered job kind's runner, by its import path (checked below)",
}


def layer_of(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0].removesuffix(".py")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["privlm", *parts])


def _dynamic_target(node: ast.Call) -> str | None:
    """The module an ``importlib.import_module(...)``/``__import__(...)`` call names, as
    far as it is written out: a literal, or an f-string's literal head (``"privlm.cli."``);
    "" when nothing of it is literal."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name not in ("import_module", "__import__") or not node.args:
        return None
    arg = node.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
        return str(arg.values[0].value).rstrip(".")
    return ""


def imports(path: Path, name: str | None = None) -> set[str]:
    """Every module ``path`` (the module ``name``, by default its own) imports: absolute,
    relative (resolved against its package) and dynamic (by the literal part of the name);
    "" for a dynamic import of a computed name."""
    tree = ast.parse(path.read_text())
    package = (name or module_name(path)).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                out.add(".".join([*base, *([node.module] if node.module else [])]))
            elif node.module:
                out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.Call):
            target = _dynamic_target(node)
            if target is not None:
                out.add(target)
    return out


def privlm_layers(modules: set[str]) -> set[str]:
    return {m.split(".")[1] for m in modules if m.startswith("privlm.") and m.count(".") >= 1}


MODULES = [p for p in SRC.rglob("*.py") if layer_of(p) in ALLOWED]


def test_every_module_has_a_layer():
    unplaced = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if layer_of(p) not in ALLOWED]
    assert not unplaced, f"modules outside every layer of docs/architecture.md: {unplaced}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_layer_imports_only_what_it_may(path):
    layer = layer_of(path)
    found = imports(path)
    rel = str(path.relative_to(SRC))
    if "" in found or "privlm" in found:
        assert rel in DYNAMIC, f"{rel} imports a module by a computed name"
    bad = privlm_layers(found) - ALLOWED[layer] - (TAGGER_MAY if rel == TAGGER else set())
    assert not bad, f"{rel} ({layer}) imports {sorted(bad)}"
    for (lower_user, used), allowed in NARROW.items():
        if layer == lower_user:
            reached = {m for m in found if m.split(".")[:2] == ["privlm", used]}
            assert reached <= allowed, f"{rel} imports {sorted(reached - allowed)}"
    heavy = {m.split(".")[0] for m in found}
    if layer == "accounting":
        assert not heavy & FORBIDDEN_IN_ACCOUNTING, f"accounting must stay free of {heavy}"
    if layer == "detect":
        forbidden = FORBIDDEN_IN_DETECT - ({"torch"} if rel in TORCH_IN_DETECT else set())
        assert not heavy & forbidden, f"{rel} must stay free of {sorted(heavy & forbidden)}"
    if layer == "perturb":
        assert not heavy & FORBIDDEN_IN_PERTURB, f"perturb must stay free of {heavy}"


def test_lazy_exports_stay_inside_their_package():
    """A package's lazy EXPORTS name its own submodules, so the one dynamic import in
    ``lazy.py`` never crosses a layer."""
    for init in SRC.rglob("__init__.py"):
        tree = ast.parse(init.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "EXPORTS" for t in node.targets
            ):
                exports = ast.literal_eval(node.value)
                for name, sub in exports.items():
                    target = init.parent / f"{sub}.py"
                    assert target.is_file() or (init.parent / sub).is_dir(), (init, name, sub)


def test_the_import_finder_sees_relative_and_dynamic_imports(tmp_path):
    """The finder itself, on a module written for it, as if it were in privlm.predict."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from ..service import app\nfrom . import engine\nimport importlib\n"
        "importlib.import_module('privlm.cli.train')\nimportlib.import_module(f'{1}x')\n"
    )
    found = imports(probe, "privlm.predict.probe")
    assert {"privlm.service", "privlm.predict", "privlm.cli.train", ""} <= found
    assert privlm_layers(found) == {"service", "predict", "cli"}


def test_nothing_imports_the_cli():
    for path in SRC.rglob("*.py"):
        if layer_of(path) not in ("cli", "__main__"):  # python -m privlm is the CLI
            assert not any(m.startswith("privlm.cli") for m in imports(path)), path


def test_registered_builders_and_runners_are_in_their_registrys_layer():
    """The dynamic imports of the two registries name modules of their own layer."""
    from privlm.predict.mechanisms import mechanisms
    from privlm.service.job_kinds import JOB_KINDS

    for m in mechanisms():
        if isinstance(m.builder, str):
            assert m.builder.split(":")[0].startswith("privlm.predict."), m.name
    for kind in JOB_KINDS.values():
        assert kind.runner.split(":")[0].startswith("privlm.service."), kind.name
