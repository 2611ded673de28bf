"""``privlm perturb``: the in-browser perturbation, from the command line."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from privlm.cli.common import JSON_OPTION, SEED_OPTION, emit_json, user_errors, warn_if_seeded
from privlm.errors import DataError
from privlm.perturb import load_glove, make_mechanism, perturb_text
from privlm.perturb.mechanisms import DEFAULT_CLIP
from privlm.perturb.readability import DEFAULT_DELTA, default_epsilon, share_unchanged, trade_off
from privlm.perturb.uniforms import UniformSource
from privlm.perturb.vocabulary import DEFAULT_VOCABULARY
from privlm.randomness import PrivacyRandomness


@user_errors
def perturb(
    source: Path = typer.Argument(..., help="Text file to perturb ('-' for standard input)."),
    out: Path | None = typer.Option(None, "--out", help="Where to write (default stdout)."),
    mechanism: str = typer.Option("laplace", help="laplace (metric DP) or gaussian."),
    epsilon: float | None = typer.Option(
        None,
        help="ε per word (worst case over any two words). Default: the least at which about "
        "three words in four come through unchanged on public text (laplace "
        f"{default_epsilon('laplace'):g}, gaussian {default_epsilon('gaussian'):g}; "
        "privlm.perturb.readability), so that the output still reads.",
    ),
    delta: float | None = typer.Option(None, help="δ per word (gaussian only; default 1e-5)."),
    clip: float = typer.Option(DEFAULT_CLIP, help="Clipping norm C of the word vectors."),
    vocabulary: int = typer.Option(
        DEFAULT_VOCABULARY,
        min=2,
        help="GloVe words kept, most frequent first (privlm ships 20,000; more need --vectors).",
    ),
    vectors: Path | None = typer.Option(
        None, help="Your own GloVe text file (.gz too) instead of the vectors privlm ships."
    ),
    seed: int | None = SEED_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Perturb text locally, as the upload page does: each word a noisy GloVe neighbour.

    Prints the guarantee per word and per document."""
    eps = default_epsilon(mechanism) if epsilon is None else epsilon  # refuses a bad name
    if delta is None and mechanism == "gaussian":
        delta = DEFAULT_DELTA
    mech = make_mechanism(mechanism, eps, delta, clip)
    readable = trade_off(mechanism, eps)
    warn_if_seeded(seed)
    if str(source) == "-":
        text = sys.stdin.read()
    else:
        if not source.is_file():
            raise DataError(source, "no such file")
        try:
            text = source.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise DataError(source, f"not UTF-8 text (byte {exc.start})") from None
    res = perturb_text(text, load_glove(vocabulary, clip, vectors), mech, UniformSource(seed))
    if out is not None:
        out.write_text(res.text + "\n", encoding="utf-8")
    if as_json:
        emit_json(
            {
                **res.to_dict(),
                "readability": {
                    "share_unchanged": share_unchanged(mechanism, eps),
                    "measured_on": "public text (privlm.perturb.readability)",
                    "trade_off": readable,
                },
                **PrivacyRandomness(seed).statement(),
                **({} if out else {"text": res.text}),
            }
        )
        return
    if out is None:
        typer.echo(res.text)
    doc = res.document_guarantee
    typer.echo(
        f"{res.words} words; per word ε = {mech.word_guarantee()['epsilon']:.4g}"
        f"{'' if mechanism == 'laplace' else f', δ = {delta:g}'}; whole text ε = "
        f"{doc['epsilon']:.4g}, δ = {doc['delta']:g}",
        err=out is None,
    )
    typer.echo(readable, err=out is None)
