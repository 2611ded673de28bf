"""The ``privlm`` command line (Typer). Every command takes ``--json``.

``privlm`` starts fast: its top level is a lazy group that imports a command's
module only when that command runs, so ``privlm --help`` or ``privlm account dpsgd`` never
loads torch. :data:`COMMANDS` lists each command, where it lives and its one-line help (a
test checks the help against the module's own). ``privlm.cli.app`` is the whole command
line as one Typer app, built on first use (for tests and embedding).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import typer
from typer.core import TyperGroup

HELP = "privlm: differentially private adaptation and serving of language models."


@dataclass(frozen=True)
class Entry:
    module: str  # privlm.cli.<module>
    attribute: str  # a Typer app (a group of commands) or a command function
    help: str  # the one line `privlm --help` shows
    # the attribute makes the app or command when mounted (options generated from a registry
    # as it is then: privlm.predict.mechanisms)
    factory: bool = False


COMMANDS: dict[str, Entry] = {
    "account": Entry("account", "app", "Privacy accounting: ε of a plan, σ for a target ε."),
    "models": Entry("models", "app", "Public models."),
    "data": Entry("data", "app", "Datasets."),
    "ledger": Entry("ledger", "app", "Privacy ledgers."),
    "ensemble": Entry("ensemble", "app", "LoRA ensembles for PMixED and SubMix."),
    "plan": Entry("plan", "plan_app", "Plan private-prediction budgets.", factory=True),
    "eval": Entry("predict", "eval_app", "Evaluate private prediction.", factory=True),
    "audit": Entry("audit", "app", "Attacks and audits."),
    "train": Entry("train", "app", "Private fine-tuning."),
    "detect": Entry("detect", "app", "Secret detectors (JFT policy functions)."),
    "prompt": Entry("prompt", "app", "Private prompt learning: PromptDPSGD, PromptPATE."),
    "generate": Entry(
        "predict",
        "generate_command",
        "Generate text privately; every released token is charged to the ledger first.",
        factory=True,
    ),
    "quickstart": Entry(
        "quickstart",
        "quickstart",
        "Public model and perplexity, a DP-SGD budget, then private prediction with PMixED.",
    ),
    "synth": Entry(
        "synth",
        "synth",
        "Write a DP synthetic dataset: in-context private prediction, or a DP-SGD LoRA.",
    ),
    "perturb": Entry(
        "perturb",
        "perturb",
        "Perturb text locally, as the upload page does: each word a noisy GloVe neighbour.",
    ),
    "serve": Entry(
        "serve", "serve", "Start the web service (FastAPI on uvicorn) and its job worker."
    ),
    "service": Entry("serve", "app", "Administer the service: tenants, API keys, the job worker."),
}


def mount(app: Any, name: str) -> None:
    """Add ``privlm NAME`` (a group of commands or one command) to the Typer ``app``,
    importing its module now."""
    entry = COMMANDS[name]
    target = getattr(importlib.import_module(f"privlm.cli.{entry.module}"), entry.attribute)
    if entry.factory:
        target = target()
    if isinstance(target, typer.Typer):
        app.add_typer(target, name=name)
    else:
        app.command(name)(target)


def load_command(name: str) -> Any:
    """The (Typer) click command of ``privlm NAME``, mounted as the whole app mounts it."""
    parent = typer.Typer(pretty_exceptions_enable=False, add_completion=False)
    mount(parent, name)
    command = typer.main.get_command(parent)
    # a group comes back inside the parent's group; a lone command comes back as itself
    return getattr(command, "commands", {}).get(name, command)


class LazyGroup(TyperGroup):
    """A Typer group whose commands are imported when they are used; its own help is plain
    text from :data:`COMMANDS` (rich help would import every command to describe it)."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        return load_command(cmd_name) if cmd_name in COMMANDS else None

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, entry.help) for name, entry in COMMANDS.items()])


def lazy_cli() -> LazyGroup:
    return LazyGroup(name="privlm", help=HELP, no_args_is_help=True, rich_markup_mode=None)


def full_app() -> Any:
    """Every command in one Typer app (imports them all)."""
    app = typer.Typer(help=HELP, no_args_is_help=True, pretty_exceptions_enable=False,
                      add_completion=False)  # fmt: skip
    for name in COMMANDS:
        mount(app, name)
    return app


def __getattr__(name: str) -> Any:
    if name == "app":
        app = full_app()
        globals()["app"] = app
        return app
    raise AttributeError(name)


def main() -> None:
    lazy_cli()(prog_name="privlm")


__all__ = ["COMMANDS", "app", "lazy_cli", "main"]
