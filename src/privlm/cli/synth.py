"""``privlm synth``: a DP synthetic dataset from private records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from privlm.cli.common import (
    DEVICE_OPTION,
    DTYPE_OPTION,
    JSON_OPTION,
    LABEL_COLUMN_OPTION,
    LEDGER_NAME_HELP,
    NO_HEADER_OPTION,
    TEXT_COLUMN_OPTION,
    USER_COLUMN_OPTION,
    emit_json,
    run_ledger,
    user_errors,
    warn_if_seeded,
)
from privlm.config import cli_settings, setting_of
from privlm.curator import CURATOR_HEADING, curator_report_path, record_statistics
from privlm.errors import PrivlmError
from privlm.models import DEFAULT_MODEL
from privlm.synth.config import SynthConfig


@user_errors
@cli_settings(SynthConfig, into="settings", exclude=("count", "auto_count"))
def synth(
    data: str = typer.Argument(
        ..., help="A .txt/.jsonl/.csv file (a .gz too), or wikitext2[:split]."
    ),
    out: Path = typer.Option(
        ...,
        "--out",
        help="The synthetic texts (JSONL); the statement goes beside it (.privacy.json).",
    ),
    count: str = typer.Option(
        str(setting_of(SynthConfig, "count").default),
        "--count",
        help=f"{setting_of(SynthConfig, 'count').help}; or auto: "
        f"{setting_of(SynthConfig, 'auto_count').help[len('Write ') :]}.",
    ),
    labels: str | None = typer.Option(
        None,
        "--labels",
        help="Declare the label set public (comma-separated): texts are generated per label, "
        "the count split evenly. Required when the data has labels.",
    ),
    text_column: str = TEXT_COLUMN_OPTION,
    label_column: str = LABEL_COLUMN_OPTION,
    user_column: str = USER_COLUMN_OPTION,
    no_header: bool = NO_HEADER_OPTION,
    model: str = typer.Option(DEFAULT_MODEL, help="Public model (its members are it, prompted)."),
    device: str = DEVICE_OPTION,
    dtype: str = DTYPE_OPTION,
    ledger: Path = typer.Option(
        Path("privlm-ledger.db"), help="Budget ledger charged before the first text."
    ),
    ledger_name: str | None = typer.Option(None, help=LEDGER_NAME_HELP),
    budget_epsilon: float | None = typer.Option(
        None, help="Budget ε of a new ledger (default: this run's --epsilon, what it may cost)."
    ),
    resume: bool = typer.Option(
        False, "--resume", help="Resume an interrupted run into the same --out (no second charge)."
    ),
    baseline: bool = typer.Option(
        False,
        "--baseline",
        help="Write the no-reference baseline instead: the same contexts, settings and "
        "mechanism with every member the public model. DATA is not read and nothing is "
        "charged; a DP set that does not beat it has bought nothing with its ε.",
    ),
    report: bool = typer.Option(
        True,
        "--report/--no-report",
        help="Write the curator's overlap report to <out>.curator.json: each text's longest "
        "word run shared with a record, its word 5-gram overlap, near copies, PII also in "
        "the records. Computed on the private records, so not DP: for the data's owner, "
        "never to be shared with the texts.",
    ),
    report_detector: str = typer.Option(
        "regex",
        help="The report's PII detector (a detect spec: pii-fast adds names and "
        "addresses through Presidio, slower; none: no PII check).",
    ),
    canary: list[str] | None = typer.Option(
        None,
        "--canary",
        help="A string planted in the records: the report says how many "
        "texts repeat it (repeatable).",
    ),
    as_json: bool = JSON_OPTION,
    *,
    settings: dict[str, Any],
) -> None:
    """Write a DP synthetic dataset: in-context private prediction, or a DP-SGD LoRA.

    --generator in-context: every token is a PMixED (or DClip, screened) release over the
    batch's in-context members. --generator dp-lora: a LoRA adapter fine-tuned with DP-SGD
    at the whole ε, then sampled. The file is (ε, δ)-DP per unit either way
    (docs/sharp_edges.md, "DP synthetic text"). Every SynthConfig setting is an option."""
    if baseline:
        _baseline(out, count, labels, user_column, model, device, dtype, as_json, settings)
        return
    if report and report_detector != "none":
        from privlm.detect.registry import detector_parts

        detector_parts(report_detector)  # an unknown spec is refused before any work
    from privlm.cli.ensemble import load_training_data

    ds = load_training_data(
        data, None, text_column=text_column, user_column=user_column,
        label_column=label_column, no_header=no_header,
    )  # fmt: skip
    cfg = SynthConfig(**settings, **count_settings(count))
    declared = [x.strip() for x in labels.split(",") if x.strip()] if labels else None
    from privlm.synth.labels import declared_labels

    declared_labels(ds, declared)  # refused before the heavy imports and the model
    from privlm.synth.run_folder import refuse_a_started_run, run_folder

    refuse_a_started_run(run_folder(out), resume)
    from privlm.models import load_public_model
    from privlm.synth import synthesize

    lm = load_public_model(model, device=device, dtype=dtype)
    # a new ledger's default budget is the run's ε (checked again, with every other charge
    # of the ledger, before the first text)
    with run_ledger(ledger, ledger_name, budget_epsilon, cfg.epsilon, cfg.delta, ds.records) as led:
        warn_if_seeded(cfg.seed)
        res = synthesize(
            lm, ds, out, cfg, labels=declared, ledger=led, resume=resume,
            progress=not as_json,
        )  # fmt: skip
    overlap = None
    if report:
        from privlm.synth.report import report_of_output

        detector = None if report_detector == "none" else report_detector
        overlap = report_of_output(out, ds.records, detector, canary or ())
        record_statistics(out, {**res.curator, "overlap": overlap})
    if as_json:
        emit_json(
            {
                **res.to_dict(),
                **({"curator_report": str(curator_report_path(out))} if report else {}),
            }
        )
        return
    typer.echo(f"{res.written} synthetic texts in {out} ({how_line(res.statement, cfg)}); "
               f"statement in {out}.privacy.json")  # fmt: skip
    if res.lost:
        typer.echo(
            f"  {res.lost} texts interrupted half-way were not redrawn (their tokens were charged)"
        )
    c = res.curator
    empty = f", {c['empty_members']} members without records" if "empty_members" in c else ""
    typer.echo(
        f"  {CURATOR_HEADING}: {c['units']} units, {c['records_left_out']} records of no "
        f"declared label left out{empty}"
    )
    if overlap is not None:
        typer.echo(f"  {CURATOR_HEADING}: {overlap_line(overlap['summary'])}; report in "
                   f"{curator_report_path(out)} (for the data's owner: never share it with the texts)")  # fmt: skip


def how_line(st: dict[str, Any], cfg: SynthConfig) -> str:
    """The guarantee and the generator's derived knobs, in one line."""
    if st.get("generator") == "dp-lora":
        return (
            f"{st['guarantee']}; dp-lora: DP-SGD σ {st['noise_multiplier']:.3g}, q "
            f"{st['sample_rate']:.3g}, {st['steps']} steps, then sampled"
        )
    knob = (
        f"clip C {st['clip']:.3g}, top-k {st['top_k']}" if st.get("clip") is not None
        else f"radius {st['radius']:.3g} at α = {st['alpha']}"
    )  # fmt: skip
    return (
        f"{st['guarantee']}; {cfg.mechanism} over {st['members']} in-context members per "
        f"text, {knob}"
    )


def overlap_line(summary: dict[str, Any]) -> str:
    """The report's summary in one line."""
    line = (
        f"longest word run shared with a record {summary['longest_run_words_max']}, "
        f"{summary['exact_copies']} exact and {summary['near_copies']} near copies"
    )
    if "texts_with_pii_also_in_records" in summary:
        line += f", {summary['texts_with_pii_also_in_records']} texts with PII also in the records"
    return line


def _baseline(
    out: Path, count: str, labels: str | None, user_column: str | None, model: str,
    device: str, dtype: str, as_json: bool, settings: dict[str, Any],
) -> None:  # fmt: skip
    """``--baseline``: the no-reference texts (privlm.synth.synthesize_baseline)."""
    from privlm.synth.config import refuse_a_baseline_count

    cfg = SynthConfig(**settings, **count_settings(count))
    refuse_a_baseline_count(cfg)  # before the model loads
    declared = [x.strip() for x in labels.split(",") if x.strip()] if labels else None
    from privlm.models import load_public_model
    from privlm.synth import synthesize_baseline

    lm = load_public_model(model, device=device, dtype=dtype)
    res = synthesize_baseline(
        lm, out, cfg, labels=declared, unit_kind="user" if user_column else "record",
        progress=not as_json,
    )  # fmt: skip
    if as_json:
        emit_json(res.to_dict())
        return
    typer.echo(
        f"{res.written} baseline texts in {out} (no private record was read: the public "
        f"model with the same contexts and settings); statement in {out}.privacy.json"
    )


def count_settings(count: str) -> dict[str, Any]:
    """``--count N`` or ``--count auto`` as SynthConfig's settings."""
    if count.strip().lower() == "auto":
        return {"auto_count": True}
    try:
        return {"count": int(count)}
    except ValueError:
        raise PrivlmError(f"--count must be a number of texts or auto, got {count!r}") from None
