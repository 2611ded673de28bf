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
    AnnotatedText,
    Span,
    load_annotated,
    make_detector,
    miss_rate_interval,
)
from privlm.detect.annotated import annotated_from_conll
from privlm.detect.pii_corpus import pii_corpus, write_corpus
from privlm.detect.pii_quality import PiiQuality, evaluate_pii
from privlm.detect.provenance import DEFAULT_SENTENCES, TAGGER_LAYER
from privlm.detect.registry import DEFAULT_DETECTOR
from privlm.errors import PrivlmError

app = typer.Typer(help="Secret detectors (JFT policy functions).", no_args_is_help=True)
DETECTOR_HELP = (
    f"One of {', '.join(DETECTOR_NAMES)}, or a union such as regex+low-entity "
    f"(default {DEFAULT_DETECTOR}: regex + privlm's recognisers + Presidio + the learned "
    "tagger; pii-fast: without the tagger)."
)
PATTERNS_OPTION = typer.Option(
    None,
    "--patterns",
    help="Rules file (YAML or JSON): your own regexes, deny-lists and allow-lists, each with "
    "a label (see privlm.detect.rules).",
)
CORPORA = ("conll", "pii", "pii-heldout", "families-dev", "families-heldout")
COLOURS = ("red", "blue", "magenta", "cyan", "yellow", "green")


def _highlight(text: str, spans: list[Span], colours: dict[str, str]) -> str:
    """The text with each span shown as [text|LABEL] in its label's colour."""
    out, pos = [], 0
    for s in spans:
        colour = colours.setdefault(s.label, COLOURS[len(colours) % len(COLOURS)])
        out.append(text[pos : s.start])
        out.append(typer.style(f"[{text[s.start : s.end]}|{s.label}]", fg=colour, bold=True))
        pos = s.end
    out.append(text[pos:])
    return "".join(out)


def _masked(text: str, spans: list[Span]) -> str:
    out, pos = [], 0
    for s in spans:
        out += [text[pos : s.start], "<mask>"]
        pos = s.end
    return "".join([*out, text[pos:]])


@app.command("redact")
@user_errors
def redact(
    data: str = typer.Argument(..., help="A .txt/.jsonl/.csv file, or a bundled corpus."),
    detector: str = typer.Option(DEFAULT_DETECTOR, help=DETECTOR_HELP),
    patterns: Path | None = PATTERNS_OPTION,
    limit: int = typer.Option(5, help="How many records to show."),
    show: bool = typer.Option(
        False, "--show", help="Print each text with every caught span highlighted and labelled."
    ),
    text_column: str = TEXT_COLUMN_OPTION,
    no_header: bool = NO_HEADER_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Show what the detector would redact: each span becomes one <mask> (--show: labelled)."""
    ds = load_training_data(data, limit, text_column=text_column, no_header=no_header)
    det = make_detector(detector, patterns=patterns)
    texts = ds.texts()
    found = det.detect(texts)
    if as_json:
        rows = [
            {"text": t, "redacted": _masked(t, spans),
             "spans": [{"start": s.start, "end": s.end, "label": s.label,
                        "text": t[s.start : s.end]} for s in spans]}
            for t, spans in zip(texts, found, strict=True)
        ]  # fmt: skip
        emit_json({"detector": det.name, "records": rows})
        return
    colours: dict[str, str] = {}
    for text, spans in zip(texts, found, strict=True):
        typer.echo(_highlight(text, spans, colours) if show else _masked(text, spans))


def _sample(corpus: str, data: Path | None, split: str, limit: int | None, n: int, seed: int
            ) -> tuple[str, list[AnnotatedText]]:  # fmt: skip
    if data is not None:
        return str(data), load_annotated(data)[:limit]
    if corpus == "conll":
        return f"CoNLL-2003 {split}", annotated_from_conll(conll2003(split)[:limit])
    if corpus.startswith("families-"):
        from privlm.detect.pii_families import DEV_FAMILIES, DEV_SOURCES, family_corpus
        from privlm.detect.pii_families_heldout import HELDOUT_FAMILIES, HELDOUT_SOURCES

        held = corpus == "families-heldout"
        families, sources = (
            (HELDOUT_FAMILIES, HELDOUT_SOURCES) if held else (DEV_FAMILIES, DEV_SOURCES)
        )
        what = "held-out" if held else "development"
        return f"{what} template families and value sources (seed {seed})", family_corpus(
            n, families, sources, seed
        )
    held_out = corpus == "pii-heldout"
    return f"privlm PII corpus ({'held-out' if held_out else 'dev'} templates, seed {seed})", (
        pii_corpus(n, seed, held_out=held_out)
    )


def _print_quality(q: PiiQuality) -> None:
    typer.echo(
        f"{q.detector}: full-span recall {q.full_recall:.3f}, any-overlap {q.overlap_recall:.3f}, "
        f"precision {q.precision:.3f}, over-redaction {q.over_redaction:.1%} "
        f"({q.seconds_per_1000:.1f} s per 1,000 texts)"
    )
    typer.echo(f"  {'gold type':<16}{'spans':>7}{'full':>8}{'alnum':>8}{'overlap':>9}")
    for t, r in q.recall_by_type.items():
        typer.echo(f"  {t:<16}{r.spans:>7}{r.full:>8.3f}{r.alnum:>8.3f}{r.overlap:>9.3f}")
    typer.echo(f"  {'detected label':<16}{'spans':>7}{'precision':>11}{'over-redaction':>16}")
    for lab, p in q.precision_by_label.items():
        typer.echo(f"  {lab:<16}{p.spans:>7}{p.precision:>11.3f}{p.over_redaction:>15.1%}")


@app.command("eval")
@user_errors
def evaluate(
    detector: list[str] = typer.Option(
        [DEFAULT_DETECTOR, "low-entity"], "--detector", help=DETECTOR_HELP + " Repeatable."
    ),
    data: Path | None = typer.Option(
        None,
        help="Annotated JSONL: text and character-offset spans with a type "
        "(privlm.detect.annotated); default: --corpus.",
    ),
    corpus: str = typer.Option(
        "conll", help=f"Built-in input when no --data: {', '.join(CORPORA)}."
    ),
    split: str = typer.Option("testb", help="CoNLL-2003 split: train, testa or testb."),
    n: int = typer.Option(2000, help="Sentences of the PII corpus.", min=1),
    seed: int = typer.Option(0, help="Seed of the PII corpus."),
    limit: int | None = typer.Option(None, help="Only the first LIMIT texts."),
    patterns: Path | None = PATTERNS_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Per-type recall (full span and any overlap), precision and over-redaction."""
    if corpus not in CORPORA:
        raise PrivlmError(f"unknown corpus {corpus!r}; choose from {', '.join(CORPORA)}")
    source, sample = _sample(corpus, data, split, limit, n, seed)
    results = [evaluate_pii(make_detector(d, patterns=patterns), sample) for d in detector]
    if as_json:
        emit_json({"input": source, "texts": len(sample),
                   "results": [r.to_dict() for r in results]})  # fmt: skip
        return
    typer.echo(f"{source}: {len(sample)} texts")
    for r in results:
        _print_quality(r)


@app.command("corpus")
@user_errors
def corpus_command(
    out: Path = typer.Argument(..., help="Where to write the annotated JSONL."),
    n: int = typer.Option(2000, help="Sentences.", min=1),
    seed: int = typer.Option(0, help="Seed (Faker and the template draws)."),
    held_out: bool = typer.Option(
        False, "--held-out", help="The held-out templates and locales (never tuned on)."
    ),
) -> None:
    """Write privlm's synthetic PII corpus (tickets, clinical notes, e-mail, chat)."""
    path = write_corpus(out, pii_corpus(n, seed, held_out=held_out))
    typer.echo(f"wrote {n} annotated sentences to {path}")


@app.command("train-tagger")
@user_errors
def train_tagger_command(
    out: Path = typer.Option(..., help="Folder for the trained head (head.pt, tagger.json)."),
    model: str = typer.Option("smollm2-135m", help="The public model whose features it reads."),
    n: int = typer.Option(
        DEFAULT_SENTENCES, help="Training sentences from the development families.", min=10
    ),
    layer: int = typer.Option(
        TAGGER_LAYER, help="Read the features after this many blocks.", min=1
    ),
    epochs: int = typer.Option(6, min=1),
    seed: int = typer.Option(0),
) -> None:
    """Train the name/address/place tagger on the development template families and value
    sources only (the held-out ones measure it: docs/results.md)."""
    from privlm.detect.tagger import TaggerConfig, train_default_tagger

    cfg = TaggerConfig(model=model, layer=layer, epochs=epochs, seed=seed)
    path = train_default_tagger(out, cfg, sentences=n)
    typer.echo(f"wrote the tagger to {path}")


@app.command("miss-rate")
@user_errors
def miss_rate(
    annotated: Path = typer.Argument(..., help="Annotated sample (JSON lines, as detect eval)."),
    detector: str = typer.Option(DEFAULT_DETECTOR, help=DETECTOR_HELP),
    patterns: Path | None = PATTERNS_OPTION,
    groups: int = typer.Option(10, help="Groups for the t-interval (the paper uses 10)."),
    as_json: bool = JSON_OPTION,
) -> None:
    """The detector's miss rate on an annotated sample, with its 95% t-interval."""
    det = make_detector(detector, patterns=patterns)
    iv = miss_rate_interval(det, load_annotated(annotated), groups=groups)
    if as_json:
        emit_json({**iv.to_dict(), "accounting_uses": "per-token rate (mean, high)"})
        return
    typer.echo(
        f"per sensitive token: {iv.missed_tokens} of {iv.sensitive_tokens} missed "
        f"({iv.sensitive_miss_rate:.1%}): how good the detector is.\n"
        f"per token (JFT's m): {iv.mean:.4g}, 95% t-interval [{iv.low:.4g}, {iv.high:.4g}] "
        f"over {iv.tokens} tokens: the chance that a sampled token is a missed secret; light "
        "noise is calibrated at q·m̃_hi, the upper end."
    )
