"""``privlm prompt``: private prompt learning (PromptDPSGD, PromptPATE) and its attack."""

from __future__ import annotations

from pathlib import Path

import typer

from privlm.cli.common import (
    DEVICE_OPTION,
    DTYPE_OPTION,
    JSON_OPTION,
    SEED_OPTION,
    emit_json,
    user_errors,
    warn_if_seeded,
)
from privlm.models import DEFAULT_MODEL, load_public_model
from privlm.prompting.evaluate import accuracy, prompt_probabilities
from privlm.prompting.pate_pipeline import PromptPateConfig, pate_ledger, run_prompt_pate
from privlm.prompting.prompt_dpsgd import PromptDpSgdConfig, train_prompt_dpsgd
from privlm.prompting.splits import task_splits
from privlm.prompting.tasks import TASKS, get_task

app = typer.Typer(help="Private prompt learning: PromptDPSGD, PromptPATE.", no_args_is_help=True)
TASK_OPTION = typer.Option("sst2", "--task", help=f"One of {', '.join(sorted(TASKS))}.")
SPLIT_SEED_OPTION = typer.Option(
    0, help="Which benchmark examples are private, public and test (no privacy randomness)."
)


@app.command("dpsgd")
@user_errors
def dpsgd(
    out: Path = typer.Option(..., "--out", help="Where to write the prompt adapter."),
    task: str = TASK_OPTION,
    kind: str = typer.Option("soft-prompt", help="soft-prompt or prefix."),
    epsilon: float | None = typer.Option(8.0, help="Target ε."),
    non_private: bool = typer.Option(False, "--non-private", help="No noise (the baseline)."),
    private: int = typer.Option(1000, help="Private training examples."),
    virtual_tokens: int = typer.Option(10, help="Soft prompt / prefix length."),
    epochs: int = typer.Option(2, help="Epochs."),
    batch_size: int = typer.Option(32, help="Expected logical (Poisson) batch size."),
    learning_rate: float = typer.Option(1e-2, "--lr", help="AdamW learning rate."),
    test: int = typer.Option(200, help="Test examples to report accuracy on (0: skip)."),
    model: str = typer.Option(DEFAULT_MODEL, help="Public model."),
    split_seed: int = SPLIT_SEED_OPTION,
    seed: int | None = SEED_OPTION,
    device: str = DEVICE_OPTION,
    dtype: str = DTYPE_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Train a soft prompt or prefix with DP-SGD; the LLM stays frozen."""
    t = get_task(task)
    splits = task_splits(t, private, 0, test, split_seed)
    warn_if_seeded(seed)
    cfg = PromptDpSgdConfig(
        kind=kind, virtual_tokens=virtual_tokens, target_epsilon=None if non_private else epsilon,
        epochs=epochs, batch_size=batch_size, learning_rate=learning_rate, seed=seed,
        device=device, dtype=dtype,
    )  # fmt: skip
    st = train_prompt_dpsgd(model, t, splits.private, out, cfg, progress=not as_json)
    result = {**st.to_dict(), "adapter": str(out)}
    if test:
        from privlm.prompting.serving import prompt_adapter_accuracy

        result["test_accuracy"] = prompt_adapter_accuracy(
            model, out, t, splits.test, device=device, dtype=dtype
        )
    if as_json:
        emit_json(result)
        return
    eps = "non-private" if st.epsilon is None else f"ε = {st.epsilon:.4g}, δ = {st.delta:.3g}"
    typer.echo(f"{kind} in {out}: {eps}, σ = {st.noise_multiplier}, {st.steps} steps")
    if test:
        typer.echo(f"test accuracy: {result['test_accuracy']:.3f} on {len(splits.test)} examples")


@app.command("pate")
@user_errors
def pate(
    out: Path = typer.Option(..., "--out", help="Where to write the student prompt."),
    task: str = TASK_OPTION,
    teachers: int = typer.Option(100, help="Teachers (one-shot prompts of private examples)."),
    shots: int = typer.Option(1, help="Private examples per teacher."),
    teacher_votes: str = typer.Option(
        "top1",
        help="top1: black-box teachers vote their top-1 token (no label: no vote); labels: "
        "each votes the argmax of its calibrated label probabilities.",
    ),
    public: int = typer.Option(300, help="Public inputs to label."),
    threshold: float = typer.Option(60.0, help="Confident-GNMax threshold T."),
    sigma_threshold: float = typer.Option(30.0, help="σ1 of the threshold check."),
    sigma: float = typer.Option(10.0, help="σ2 of GNMax."),
    epsilon: float = typer.Option(8.0, help="Budget ε: labelling stops before exceeding it."),
    delta: float | None = typer.Option(
        None, help="δ (default min(1/N^1.1, 1e-6), N private examples)."
    ),
    private: int | None = typer.Option(
        None,
        help="Private examples (default 3 × teachers × shots: units are placed by a keyed "
        "hash, so a teacher is left empty, and abstains, with probability about e^-3).",
    ),
    holdout: int = typer.Option(100, help="Labelled public inputs held back to pick the student."),
    candidates: int = typer.Option(20, help="Candidate student prompts."),
    test: int = typer.Option(200, help="Test examples for the student's accuracy (0: skip)."),
    ledger: Path = typer.Option(Path("privlm-ledger.db"), help="Budget ledger."),
    ledger_name: str = typer.Option("prompt-pate", help="Ledger name."),
    model: str = typer.Option(DEFAULT_MODEL, help="Public model."),
    split_seed: int = SPLIT_SEED_OPTION,
    seed: int | None = SEED_OPTION,
    device: str = DEVICE_OPTION,
    dtype: str = DTYPE_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """PromptPATE: teachers label public inputs by Confident-GNMax; a student prompt is chosen."""
    t = get_task(task)
    n_private = private if private is not None else 3 * teachers * shots
    splits = task_splits(t, n_private, public, test, split_seed)
    warn_if_seeded(seed)
    cfg = PromptPateConfig(
        teachers=teachers, shots=shots, threshold=threshold, sigma_threshold=sigma_threshold,
        sigma=sigma, epsilon=epsilon, delta=delta, student_candidates=candidates,
        holdout=holdout, seed=seed, teacher_votes=teacher_votes,
    )  # fmt: skip
    led = pate_ledger(ledger, ledger_name, cfg, len(splits.private))
    lm = load_public_model(model, device=device, dtype=dtype)
    res = run_prompt_pate(lm, t, splits.private, splits.public, out, led, cfg, progress=not as_json)
    result = {**res.to_dict(), **lm.placement.describe()}
    if test:
        probs = prompt_probabilities(lm.model, lm.tokenizer, t, res.student.records(), splits.test)
        result["student_test_accuracy"] = accuracy(probs, t, splits.test)
    if as_json:
        emit_json(result)
        return
    typer.echo(
        f"student prompt in {out}: ({res.epsilon:.4g}, {res.delta:.3g})-DP (data-dependent), "
        f"{res.answered} of {res.queries} public inputs labelled"
    )
    if test:
        typer.echo(f"student test accuracy: {result['student_test_accuracy']:.3f}")


@app.command("eval")
@user_errors
def evaluate(
    task: str = TASK_OPTION,
    shots: int = typer.Option(0, help="Demonstrations per prompt (0: zero-shot)."),
    prompts: int = typer.Option(5, help="Random prompts to average over (k > 0)."),
    calibrated: bool = typer.Option(True, help="Contextual calibration (Zhao et al. 2021)."),
    test: int = typer.Option(200, help="Test examples."),
    model: str = typer.Option(DEFAULT_MODEL, help="Public model."),
    seed: int = typer.Option(0, help="Seed."),
    device: str = DEVICE_OPTION,
    dtype: str = DTYPE_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Non-private accuracy of k-shot prompts: the zero-shot and one-shot reference points."""
    import numpy as np

    t = get_task(task)
    splits = task_splits(t, max(1, shots * prompts), 0, test, seed)
    lm = load_public_model(model, device=device, dtype=dtype)
    accs = []
    for p in range(prompts if shots else 1):
        demos = splits.private[p * shots : (p + 1) * shots]
        probs = prompt_probabilities(lm.model, lm.tokenizer, t, demos, splits.test, calibrated)
        accs.append(accuracy(probs, t, splits.test))
    result = {"task": task, "shots": shots, "calibrated": calibrated, "accuracies": accs,
              "mean": float(np.mean(accs)), "best": float(np.max(accs)), "test": len(splits.test),
              **lm.placement.describe()}  # fmt: skip
    if as_json:
        emit_json(result)
        return
    typer.echo(
        f"{task}, {shots}-shot: mean accuracy {result['mean']:.3f}, best {result['best']:.3f}"
    )


@app.command("mia")
@user_errors
def mia(
    task: str = TASK_OPTION,
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

    t = get_task(task)
    splits = task_splits(t, 2000 if task != "cb" else 200, 0, 0, seed)
    lm = load_public_model(model, device=device, dtype=dtype)
    res = prompt_mia(
        lm.model, lm.tokenizer, t, splits.private, prompts, nonmembers, seed, not as_json
    )
    if as_json:
        emit_json({**res.to_dict(), **lm.placement.describe()})
        return
    typer.echo(
        f"AUC {res.auc:.3f} (mean per prompt {res.mean_prompt_auc:.3f}) over {prompts} prompts"
    )
