"""``privlm`` starts fast. The top level imports a command's module only when
that command runs, so ``privlm --help`` loads neither torch nor transformers, and the lazy
command line is the same as the whole one."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest
import typer

from privlm.cli import COMMANDS, lazy_cli

pytestmark = pytest.mark.fast


def privlm(*args):
    return subprocess.run([sys.executable, "-m", "privlm", *args], capture_output=True,
                          text=True)  # fmt: skip


def test_help_loads_no_machine_learning_library():
    code = (
        "import sys\nfrom privlm.cli import main\nsys.argv = ['privlm', '--help']\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert e.code == 0\n"
        "print(sorted(m for m in ('torch', 'transformers', 'opacus', 'peft') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"
    assert "prompt" in out.stdout and "Private prompt learning" in out.stdout


def _loaded_by_every_help(heavy: tuple[str, ...], skip: tuple[str, ...] = ()) -> list[str]:
    """Which of ``heavy`` are loaded after every ``privlm COMMAND … --help`` (but ``skip``)
    ran in one fresh process."""
    code = (
        (
            "import sys, io, contextlib\nfrom privlm.cli import COMMANDS, lazy_cli\n"
            "for name in COMMANDS:\n"
            "    if name in SKIP:\n        continue\n"
            "    group = lazy_cli().get_command(None, name)\n"
            "    for sub in [[]] + [[c] for c in getattr(group, 'commands', {})]:\n"
            "        with contextlib.redirect_stdout(io.StringIO()):\n"
            "            try:\n                lazy_cli().main([name, *sub, '--help'], prog_name='privlm')\n"
            "            except SystemExit as e:\n                assert e.code == 0, (name, sub)\n"
            "print(sorted(m for m in HEAVY if m in sys.modules))"
        )
        .replace("HEAVY", repr(heavy))
        .replace("SKIP", repr(skip))
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    return eval(out.stdout.strip().splitlines()[-1])  # a printed list of names


def test_every_commands_help_loads_no_machine_learning_library():
    """Config classes live in torch-free modules (privlm.training.config, privlm.predict.config,
    privlm.prompting.config), the accounting's names load on first use, and each command
    imports its heavy code when it runs, so every ``privlm COMMAND … --help`` answers without
    torch, transformers, peft, Opacus, SciPy or SQLAlchemy (under a second on the 2-core
    development machine: docs/results.md)."""
    assert _loaded_by_every_help(("torch", "transformers", "opacus", "peft", "scipy",
                                  "sqlalchemy")) == []  # fmt: skip


def test_the_settings_modules_help_loads_no_numpy():
    """The prediction and synthesis settings (privlm.predict.config, privlm.synth.config)
    read PMixED's bounds from a module without NumPy (privlm.accounting.analysis.
    pmixed_bounds) and import the analysis where a cost is computed, so every help but
    ``perturb``'s and ``detect``'s (whose defaults come from their NumPy code) loads none."""
    assert _loaded_by_every_help(("numpy",), skip=("perturb", "detect")) == []


def test_every_lazy_command_is_the_modules_own_with_its_own_help():
    full = typer.main.get_command(importlib.import_module("privlm.cli").full_app())
    assert sorted(COMMANDS) == sorted(full.commands)
    for name, entry in COMMANDS.items():
        target = getattr(importlib.import_module(f"privlm.cli.{entry.module}"), entry.attribute)
        if entry.factory:
            target = target()
        own = target.info.help if isinstance(target, typer.Typer) else target.__doc__
        assert own.strip().splitlines()[0] == entry.help, name
        lazy = lazy_cli().get_command(None, name)
        assert sorted(getattr(lazy, "commands", {})) == sorted(
            getattr(full.commands[name], "commands", {})
        )
        assert [p.name for p in lazy.params] == [p.name for p in full.commands[name].params]


def test_the_lazy_command_line_runs_commands_and_reports_errors_with_exit_code_2():
    plan = ["--sample-rate", "0.01", "--steps", "10", "--delta", "1e-5"]
    ok = privlm("account", "dpsgd", "--noise-multiplier", "1", *plan)
    assert ok.returncode == 0 and "ε =" in ok.stdout
    bad = privlm("account", "dpsgd", "--noise-multiplier", "-1", *plan)
    assert bad.returncode == 2 and "error: the noise multiplier" in bad.stderr
    assert "Traceback" not in bad.stderr
    assert privlm("no-such-command").returncode == 2


REFUSALS = [
    (["synth", "nope.csv", "--out", "x.jsonl"], "file not found"),
    (["synth", "data.csv", "--out", "x.jsonl"], "declare the label set public"),
    (["synth", "data.csv", "--out", "x.jsonl", "--labels", "a", "--label-column", "topic"],
     "no 'topic' column"),
    (["synth", "data.csv", "--out", "x.jsonl", "--labels", "zzz"], "no record has the declared"),
    (["train", "dpsgd", "nope.csv", "--out", "d/"], "file not found"),
    (["train", "dpsgd", "data.csv", "--out", "d/", "--user-column", "who"], "no 'who' column"),
    (["generate", "nope/", "--prompt", "Dear"], "no manifest.json"),
    (["eval", "ppl", "--ensemble", "nope/", "--method", "pmixed"], "no manifest.json"),
    (["quickstart", "--blocks", "0"], "greater than or equal to 1"),
    (["ledger", "show", "nope.db"], "no such ledger file"),
    (["synth", "data.csv", "--out", "started.jsonl", "--labels", "a,b"], "holds a synth run"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "why"), REFUSALS, ids=lambda a: " ".join(a)[:40])
def test_a_refused_argument_or_file_loads_no_machine_learning_library(tmp_path, args, why):
    """Argument, file, column and label checks run before any heavy import, so a simple
    mistake is refused in about a second of CPU (bench/bench_cli_help.py times them)."""
    (tmp_path / "data.csv").write_text("text,label\nhello there,a\nfine day,b\n")
    (tmp_path / ".started.jsonl.synth").mkdir()  # a synth run begun into started.jsonl
    (tmp_path / ".started.jsonl.synth" / "state.json").write_text("{}")
    code = (
        "import sys\nfrom privlm.cli import main\n"
        f"sys.argv = ['privlm', *{args!r}]\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert e.code == 2, e.code\n"
        "print(sorted(m for m in ('torch', 'transformers', 'opacus', 'peft') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert why in out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"
