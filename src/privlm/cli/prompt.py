"""``privlm prompt``: private prompt learning (PromptDPSGD, PromptPATE) and its attack."""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from privlm.cli.common import (
    DEVICE_OPTION,
    DTYPE_OPTION,
    JSON_OPTION,
    LEDGER_NAME_HELP,
    emit_json,
    noise_from_flags,
    run_ledger,
    user_errors,
    warn_if_few_steps,
    warn_if_seeded,
)
from privlm.config import cli_settings
from privlm.errors import PrivlmError
from privlm.models import DEFAULT_MODEL
from privlm.prompting.config import PromptDpSgdConfig, PromptPateConfig
from privlm.prompting.tasks import TASKS, Task, get_task, load_task_file

if TYPE_CHECKING:  # NumPy-backed: loaded where a command runs, not for its --help
    from privlm.prompting.splits import TaskSplits
    from privlm.prompting.task_data import TaskFiles

app = typer.Typer(help="Private prompt learning: PromptDPSGD, PromptPATE.", no_args_is_help=True)
TASK_OPTION = typer.Option(
    None, "--task", help=f"A bundled task: {', '.join(sorted(TASKS))} (default sst2)."
)
TASK_FILE_OPTION = typer.Option(
    None,
    "--task-file",
    help="Your own task: a .yaml or .json file naming the labels, their verbalisers and a "
    "template with {text} (README, 'Your own task').",
)
PRIVATE_DATA_OPTION = typer.Option(
    None,
    "--private-data",
    help="Labelled private examples (.jsonl or .csv, .gz too); with a user column, the "
    "privacy unit is the user. Default: the bundled task's corpus.",
)
PUBLIC_DATA_OPTION = typer.Option(
    None,
    "--public-data",
    help="Unlabelled public inputs to label (.jsonl, .csv or .txt; out-of-distribution is "
    "fine). Default: the bundled task's corpus.",
)
TEST_DATA_OPTION = typer.Option(
    None,
    "--test-data",
    help="Labelled held-out examples to report accuracy on. Default: the bundled task's test split.",
)
TASK_TEXT_COLUMN = typer.Option(
    None, "--text-column", help="Column holding the text (default: the task file's, else text)."
)
TASK_LABEL_COLUMN = typer.Option(
    None, "--label-column", help="Column holding the label (default: the task file's, else label)."
)
TASK_USER_COLUMN = typer.Option(
    None, "--user-column", help="Column naming the user (default: the task file's, else user_id)."
)
TASK_NO_HEADER = typer.Option(
    False, "--no-header", help="CSVs whose first row is data: columns are positions (1, 2, …)."
)
SPLIT_SEED_OPTION = typer.Option(
    0, help="Which examples are private, public and test (no privacy randomness)."
)


def resolve_task(task: str | None, task_file: Path | None) -> Task:
    """``--task NAME`` or ``--task-file FILE`` (not both); sst2 when neither is given."""
    if task is not None and task_file is not None:
        raise PrivlmError("give --task or --task-file, not both")
    return load_task_file(task_file) if task_file is not None else get_task(task or "sst2")


def task_files(
    private: Path | None,
    public: Path | None,
    test: Path | None,
    text_column: str | None,
    label_column: str | None,
    user_column: str | None,
    no_header: bool,
) -> TaskFiles:
    from privlm.prompting.task_data import ColumnOverrides, TaskFiles

    columns = ColumnOverrides(text_column, label_column, user_column, no_header)
    return TaskFiles(private, public, test, columns)


def describe_splits(splits: TaskSplits, as_json: bool) -> None:
    if not as_json:
        sizes = ", ".join(f"{len(getattr(splits, r))} {r}" for r in ("private", "public", "test"))
        typer.echo(f"examples: {sizes}", err=True)


@app.command("dpsgd")
@user_errors
@cli_settings(
    PromptDpSgdConfig, into="settings",
    decls={"target_epsilon": ("--epsilon",), "learning_rate": ("--lr",)},
)  # fmt: skip
def dpsgd(
    out: Path = typer.Option(..., "--out", help="Where to write the prompt adapter."),
    task: str | None = TASK_OPTION,
    task_file: Path | None = TASK_FILE_OPTION,
    private_data: Path | None = PRIVATE_DATA_OPTION,
    test_data: Path | None = TEST_DATA_OPTION,
    text_column: str | None = TASK_TEXT_COLUMN,
    label_column: str | None = TASK_LABEL_COLUMN,
    user_column: str | None = TASK_USER_COLUMN,
    no_header: bool = TASK_NO_HEADER,
    private: int | None = typer.Option(
        None,
        help="Private examples from the corpus (default 1000); a --private-data file is used whole.",
    ),
    test: int | None = typer.Option(
        None, help="Test examples (default 200 of the corpus, or all of --test-data; 0: skip)."
    ),
    model: str = typer.Option(DEFAULT_MODEL, help="Public model."),
    split_seed: int = SPLIT_SEED_OPTION,
    ledger: Path = typer.Option(
        Path("privlm-ledger.db"), help="Budget ledger, charged before the prompt is written."
    ),
    ledger_name: str | None = typer.Option(None, help=LEDGER_NAME_HELP),
    budget_epsilon: float | None = typer.Option(
        None, help="Budget ε of a new ledger (default: what this run costs)."
    ),
    as_json: bool = JSON_OPTION,
    *,
    settings: dict[str, Any],
) -> None:
    """Train a soft prompt or prefix with DP-SGD; the LLM stays frozen. With --ledger, the
    run is refused before training if it does not fit, and charged before it is written."""
    from privlm.prompting.prompt_dpsgd import PromptRun, TaskExamples, train_prompt_dpsgd

    t = resolve_task(task, task_file)
    files = task_files(private_data, None, test_data, text_column, label_column, user_column,
                       no_header)  # fmt: skip
    from privlm.prompting.task_data import task_data

    splits = task_data(t, files, {"private": private, "public": 0, "test": test},
                       {"private": 1000, "test": 200}, split_seed, need=("private",))  # fmt: skip
    describe_splits(splits, as_json)
    cfg = PromptDpSgdConfig(**noise_from_flags(settings))
    warn_if_seeded(cfg.seed)
    kind, device, dtype = cfg.kind, cfg.device, cfg.dtype
    examples = TaskExamples(t, splits.private)
    run = PromptRun.plan(examples, cfg).run
    opened: Any = nullcontext(None)
    if run.private:  # the non-private baseline (--noise none) charges nothing
        cost = run.epsilon(cfg.accountant), run.delta
        opened = run_ledger(ledger, ledger_name, budget_epsilon, *cost, splits.private)
        warn_if_few_steps(run.steps, run.sample_rate, run.units, cfg.batch_size)
    with opened as led:
        st = train_prompt_dpsgd(model, examples, out, cfg, ledger=led, progress=not as_json)
    result = {**st.to_dict(), "adapter": str(out), "task": t.name}
    if splits.test:
        from privlm.prompting.serving import prompt_adapter_accuracy

        result["test_accuracy"] = prompt_adapter_accuracy(
            model, out, t, splits.test, device=device, dtype=dtype
        )
    if as_json:
        emit_json(result)
        return
    from privlm.accounting.statements import guarantee_text

    eps = (
        f"non-private, per {st.unit}"
        if st.epsilon is None or st.delta is None
        else guarantee_text(st.epsilon, st.delta, st.unit)
    )
    typer.echo(f"{kind} in {out}: {eps}, σ = {st.noise_multiplier}, {st.steps} steps")
    if st.records_left_out:
        typer.echo(f"{st.records_left_out} records after each user's first were left out")
    if splits.test:
        typer.echo(f"test accuracy: {result['test_accuracy']:.3f} on {len(splits.test)} examples")


@app.command("pate")
@user_errors
@cli_settings(PromptPateConfig, into="settings", decls={"student_candidates": ("--candidates",)})
def pate(
    out: Path = typer.Option(..., "--out", help="Where to write the student prompt."),
    task: str | None = TASK_OPTION,
    task_file: Path | None = TASK_FILE_OPTION,
    private_data: Path | None = PRIVATE_DATA_OPTION,
    public_data: Path | None = PUBLIC_DATA_OPTION,
    test_data: Path | None = TEST_DATA_OPTION,
    text_column: str | None = TASK_TEXT_COLUMN,
    label_column: str | None = TASK_LABEL_COLUMN,
    user_column: str | None = TASK_USER_COLUMN,
    no_header: bool = TASK_NO_HEADER,
    public: int | None = typer.Option(
        None, help="Public inputs to load (default 300 of the corpus, or all of --public-data)."
    ),
    private: int | None = typer.Option(
        None,
        help="Private examples from the corpus (a --private-data file is used whole; default "
        "3 × teachers × shots: units are placed by a keyed hash, so a teacher is left empty, and abstains, "
        "with probability about e^-3).",
    ),
    test: int | None = typer.Option(
        None, help="Test examples (default 200 of the corpus, or all of --test-data; 0: skip)."
    ),
    ledger: Path = typer.Option(Path("privlm-ledger.db"), help="Budget ledger."),
    ledger_name: str | None = typer.Option(None, help=LEDGER_NAME_HELP),
    model: str = typer.Option(DEFAULT_MODEL, help="Public model."),
    split_seed: int = SPLIT_SEED_OPTION,
    device: str = DEVICE_OPTION,
    dtype: str = DTYPE_OPTION,
    as_json: bool = JSON_OPTION,
    *,
    settings: dict[str, Any],
) -> None:
    """PromptPATE: teachers label public inputs by Confident-GNMax; a student prompt is chosen."""
    from privlm.models import load_public_model
    from privlm.prompting.evaluate import accuracy, prompt_probabilities
    from privlm.prompting.pate_pipeline import PateExamples, pate_delta, run_prompt_pate

    cfg = PromptPateConfig(**settings)  # refused now, before any data is read
    t = resolve_task(task, task_file)
    files = task_files(private_data, public_data, test_data, text_column, label_column,
                       user_column, no_header)  # fmt: skip
    from privlm.prompting.task_data import task_data

    splits = task_data(
        t, files, {"private": private, "public": public, "test": test},
        {"private": 3 * cfg.teachers * cfg.shots, "public": 300, "test": 200}, split_seed,
        need=("private", "public"),
    )  # fmt: skip
    describe_splits(splits, as_json)
    warn_if_seeded(cfg.seed)
    warn_if_weak_threshold(cfg, len(t.labels))
    delta = pate_delta(cfg, len({r.unit for r in splits.private}))
    # a new ledger's budget is --epsilon; an existing one (the data's, shared with the other
    # runs on these records) keeps its own, and the queries asked must fit what is left
    with run_ledger(ledger, ledger_name, None, cfg.epsilon, delta, splits.private) as led:
        lm = load_public_model(model, device=device, dtype=dtype)
        res = run_prompt_pate(
            lm, PateExamples(t, splits.private, splits.public), out, cfg, ledger=led,
            progress=not as_json,
        )  # fmt: skip
    result = {**res.to_dict(), "task": t.name, **lm.placement.describe()}
    if splits.test:
        probs = prompt_probabilities(lm.model, lm.tokenizer, t, res.student.records(), splits.test)
        result["student_test_accuracy"] = accuracy(probs, t, splits.test)
    if as_json:
        emit_json(result)
        return
    from privlm.accounting.statements import guarantee_text

    typer.echo(
        f"student prompt in {out}: {guarantee_text(res.epsilon, res.delta, res.unit)} "
        f"({res.accounting}), "
        f"{res.answered} of {res.queries} public inputs labelled"
    )
    if splits.test:
        typer.echo(f"student test accuracy: {result['student_test_accuracy']:.3f}")
    curator = result["not_private_for_the_curator"]
    typer.echo(
        "not private, for the curator (raw votes, no ε covers them): teacher accuracy "
        f"{curator['teacher_accuracy_mean']}, teachers' plurality {curator['ensemble_accuracy']}, "
        f"'other' answers {curator['other_rate']:.3f}, {curator['seconds']:.0f} s"
    )


def warn_if_weak_threshold(cfg: PromptPateConfig, classes: int) -> None:
    """Before any query: print, on stderr, when noise alone will pass queries."""
    from privlm.accounting.advice import threshold_warning

    message = threshold_warning(cfg.threshold, cfg.sigma_threshold, cfg.teachers, classes)
    if message is not None:
        typer.echo(f"warning: {message}", err=True)


@app.command("eval")
@user_errors
def evaluate(
    task: str | None = TASK_OPTION,
    task_file: Path | None = TASK_FILE_OPTION,
    private_data: Path | None = typer.Option(
        None, "--private-data", help="Labelled examples the demonstrations are drawn from."
    ),
    test_data: Path | None = TEST_DATA_OPTION,
    text_column: str | None = TASK_TEXT_COLUMN,
    label_column: str | None = TASK_LABEL_COLUMN,
    user_column: str | None = TASK_USER_COLUMN,
    no_header: bool = TASK_NO_HEADER,
    shots: int = typer.Option(0, help="Demonstrations per prompt (0: zero-shot)."),
    prompts: int = typer.Option(5, help="Random prompts to average over (k > 0)."),
    calibrated: bool = typer.Option(True, help="Contextual calibration (Zhao et al. 2021)."),
    test: int | None = typer.Option(
        None, help="Test examples (default 200 of the corpus, or all of --test-data)."
    ),
    model: str = typer.Option(DEFAULT_MODEL, help="Public model."),
    seed: int = typer.Option(0, help="Seed."),
    device: str = DEVICE_OPTION,
    dtype: str = DTYPE_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Non-private accuracy of k-shot prompts: the zero-shot and one-shot reference points."""
    import numpy as np

    from privlm.models import load_public_model
    from privlm.prompting.evaluate import accuracy, prompt_probabilities

    t = resolve_task(task, task_file)
    files = task_files(private_data if shots else None, None, test_data, text_column,
                       label_column, user_column, no_header)  # fmt: skip
    demos_needed = shots * prompts
    from privlm.prompting.task_data import task_data

    splits = task_data(
        t, files, {"private": None if private_data else demos_needed, "public": 0, "test": test},
        {"test": 200}, seed, need=("test", "private") if shots else ("test",),
    )  # fmt: skip
    if len(splits.private) < demos_needed:
        raise PrivlmError(
            f"{prompts} prompts of {shots} shots need {demos_needed} labelled examples; "
            f"the private data has {len(splits.private)}"
        )
    demo_order = np.random.default_rng(seed).permutation(len(splits.private))
    lm = load_public_model(model, device=device, dtype=dtype)
    accs = []
    for p in range(prompts if shots else 1):
        demos = [splits.private[int(i)] for i in demo_order[p * shots : (p + 1) * shots]]
        probs = prompt_probabilities(lm.model, lm.tokenizer, t, demos, splits.test, calibrated)
        accs.append(accuracy(probs, t, splits.test))
    result = {"task": t.name, "shots": shots, "calibrated": calibrated, "accuracies": accs,
              "mean": float(np.mean(accs)), "best": float(np.max(accs)), "test": len(splits.test),
              **lm.placement.describe()}  # fmt: skip
    if as_json:
        emit_json(result)
        return
    typer.echo(
        f"{t.name}, {shots}-shot: mean accuracy {result['mean']:.3f}, best {result['best']:.3f}"
    )


@app.command("mia")
@user_errors
def mia(
    task: str | None = TASK_OPTION,
    task_file: Path | None = TASK_FILE_OPTION,
    private_data: Path | None = typer.Option(
        None,
        "--private-data",
        help="Labelled examples: members (the prompts' demonstrations) and non-members are "
        "drawn from them. Default: the bundled task's corpus.",
    ),
    text_column: str | None = TASK_TEXT_COLUMN,
    label_column: str | None = TASK_LABEL_COLUMN,
    user_column: str | None = TASK_USER_COLUMN,
    no_header: bool = TASK_NO_HEADER,
    prompts: int = typer.Option(100, help="Random one-shot prompts."),
    nonmembers: int = typer.Option(50, help="Non-members per prompt."),
    model: str = typer.Option(DEFAULT_MODEL, help="Public model."),
    seed: int = typer.Option(0, help="Seed."),
    device: str = DEVICE_OPTION,
    dtype: str = DTYPE_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Membership inference against non-private one-shot prompts (Flocks §3): its AUC."""
    from privlm.audit.prompt_mia import prompt_mia
    from privlm.models import load_public_model

    t = resolve_task(task, task_file)
    files = task_files(private_data, None, None, text_column, label_column, user_column,
                       no_header)  # fmt: skip
    pool = 200 if t.corpus == "cb" else 2000
    from privlm.prompting.task_data import task_data

    splits = task_data(t, files, {"public": 0, "test": 0}, {"private": pool}, seed,
                       need=("private",))  # fmt: skip
    lm = load_public_model(model, device=device, dtype=dtype)
    res = prompt_mia(
        lm.model, lm.tokenizer, t, splits.private, prompts, nonmembers, seed, not as_json
    )
    if as_json:
        emit_json({**res.to_dict(), "task": t.name, **lm.placement.describe()})
        return
    typer.echo(
        f"AUC {res.auc:.3f} (mean per prompt {res.mean_prompt_auc:.3f}) over {prompts} prompts"
    )
