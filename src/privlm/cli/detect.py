"""``privlm detect``: try a secret detector before training with it."""

from __future__ import annotations

from pathlib import Path

import typer

from privlm.cli.common import (
    JSON_OPTION,
    NO_HEADER_OPTION,
    TEXT_COLUMN_OPTION,
    emit_json,
    user_errors,
)
from privlm.cli.ensemble import load_training_data
from privlm.data.corpora import conll2003
from privlm.detect import (
    DETECTOR_NAMES,
    evaluate_on_conll,
    load_annotated,
    make_detector,
    miss_rate_interval,
)

app = typer.Typer(help="Secret detectors (JFT policy functions).", no_args_is_help=True)
DETECTOR_HELP = f"One of {', '.join(DETECTOR_NAMES)}, or a union such as regex+low-entity."


@app.command("redact")
@user_errors
def redact(
    data: str = typer.Argument(..., help="A .txt/.jsonl/.csv file, or a bundled corpus."),
    detector: str = typer.Option("low-entity", help=DETECTOR_HELP),
    limit: int = typer.Option(5, help="How many records to show."),
    text_column: str = TEXT_COLUMN_OPTION,
    no_header: bool = NO_HEADER_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Show what the detector would redact: each span becomes one <mask>."""
    ds = load_training_data(data, limit, text_column=text_column, no_header=no_header)
    det = make_detector(detector)
    texts = ds.texts()
    rows = []
    for text, spans in zip(texts, det.detect(texts), strict=True):
        out, pos = [], 0
        for s in spans:
            out.append(text[pos : s.start])
            out.append("<mask>")
            pos = s.end
        out.append(text[pos:])
        rows.append({"redacted": "".join(out), "spans": [[s.start, s.end, s.label] for s in spans]})
    if as_json:
        emit_json({"detector": det.name, "records": rows})
        return
    for r in rows:
        typer.echo(r["redacted"])


@app.command("eval")
@user_errors
def evaluate(
    detector: list[str] = typer.Option(
        ["low-entity", "high-entity", "low-contextual", "high-contextual"],
        "--detector",
        help=DETECTOR_HELP + " Repeatable.",
    ),
    split: str = typer.Option("testb", help="CoNLL-2003 split: train, testa or testb."),
    limit: int | None = typer.Option(None, help="Only the first LIMIT sentences."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Recall and precision of detectors on CoNLL-2003 entity tokens."""
    sents = conll2003(split)[:limit]
    results = [evaluate_on_conll(make_detector(d), sents) for d in detector]
    if as_json:
        emit_json({"split": split, "results": [r.to_dict() for r in results]})
        return
    typer.echo(f"CoNLL-2003 {split}, {len(sents)} sentences")
    typer.echo(f"{'detector':<18}{'recall':>8}{'precision':>11}{'entity recall':>15}{'flagged':>9}")
    for r in results:
        typer.echo(
            f"{r.detector:<18}{r.token_recall:>8.3f}{r.token_precision:>11.3f}"
            f"{r.entity_recall:>15.3f}{100 * r.flagged_fraction:>8.1f}%"
        )


@app.command("miss-rate")
@user_errors
def miss_rate(
    annotated: Path = typer.Argument(..., help="Annotated sample (JSON lines)."),
    detector: str = typer.Option("low-entity", help=DETECTOR_HELP),
    groups: int = typer.Option(10, help="Groups for the t-interval (the paper uses 10)."),
    as_json: bool = JSON_OPTION,
) -> None:
    """The detector's miss rate on an annotated sample, with its 95% t-interval."""
    iv = miss_rate_interval(make_detector(detector), load_annotated(annotated), groups=groups)
    if as_json:
        emit_json(iv.to_dict())
        return
    typer.echo(
        f"miss rate {iv.mean:.4g} (95% t-interval [{iv.low:.4g}, {iv.high:.4g}]); "
        f"{iv.missed_tokens} of {iv.sensitive_tokens} sensitive tokens missed, "
        f"{iv.tokens} tokens"
    )
