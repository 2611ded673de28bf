"""``privlm audit``: attacks that measure leakage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from privlm.audit import DEFAULT_PREFIX
from privlm.audit.config import ExtractionConfig
from privlm.cli.common import DEVICE_OPTION, DTYPE_OPTION, JSON_OPTION, emit_json, user_errors
from privlm.config import option
from privlm.errors import PrivlmError
from privlm.models import DEFAULT_MODEL

app = typer.Typer(help="Attacks and audits.", no_args_is_help=True)


@app.command("extraction")
@user_errors
def extraction(
    model: str = typer.Option(DEFAULT_MODEL, help="Public model."),
    codes: int = option(ExtractionConfig, "codes"),
    length: int = option(ExtractionConfig, "length"),
    generations: int = option(ExtractionConfig, "generations"),
    epsilon_pmixed: float = option(ExtractionConfig, "epsilon_pmixed"),
    epsilon_submix: float = option(ExtractionConfig, "epsilon_submix"),
    sample_rate: float = option(ExtractionConfig, "sample_rate"),
    epochs: int = option(ExtractionConfig, "epochs"),
    learning_rate: float = option(ExtractionConfig, "learning_rate", "--lr"),
    workdir: Path | None = typer.Option(None, help="Where to keep the models (default: temp)."),
    seed: int | None = option(ExtractionConfig, "seed"),
    device: str = DEVICE_OPTION,
    dtype: str = DTYPE_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """SubMix §4.2: hit rate of random-code extraction against a non-private fine-tune,
    PMixED and SubMix."""
    from privlm.audit.extraction import run_extraction

    cfg = ExtractionConfig(codes, length, generations, epsilon_pmixed, epsilon_submix,
                           sample_rate, epochs, learning_rate, seed)  # fmt: skip
    out = run_extraction(model, cfg, cfg.training(device, dtype), workdir, progress=not as_json)
    if as_json:
        emit_json(out)
        return
    typer.echo(
        f"{codes} secret {length}-digit codes, {generations} generations each (chance {out['chance_hit_rate']:.2%})"
    )
    for r in out["results"]:
        eps = (
            "non-private"
            if r["epsilon_spent"] is None
            else f"ε spent {r['epsilon_spent']:.3g}: {r['relation']}"
        )
        typer.echo(
            f"  {r['method']:<10} hit rate {r['hit_rate']:.2f} ({r['hits']}/{r['generations']}), {eps}"
        )


@app.command("exposure")
@user_errors
def exposure(
    canary: str = typer.Option(
        ...,
        help="The canary's digits: random ones (see random_canary), never a pattern like 123456.",
    ),
    model: str = typer.Option(DEFAULT_MODEL, help="Public model."),
    adapter: Path | None = typer.Option(
        None, help="A PEFT adapter to audit (default: the public model)."
    ),
    prefix: str = typer.Option(DEFAULT_PREFIX, help="Text before the digits."),
    max_rows: int = typer.Option(
        10_000, help="Largest batch of candidate prefixes per forward pass."
    ),
    device: str = DEVICE_OPTION,
    dtype: str = DTYPE_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Exposure of a digit canary: log2|R| − log2 rank among all 10^d candidates (exact)."""
    from privlm.audit.exposure import patterned, random_canary

    if patterned(canary):
        raise PrivlmError(
            f"the canary {canary!r} is a pattern the public model already ranks near the top, "
            "so its exposure measures nothing about training; plant random digits in the "
            f"training data (e.g. {random_canary(len(canary))}) and measure those"
        )
    from peft import PeftModel

    from privlm.audit.exposure import measure_exposure
    from privlm.models import load_public_model

    lm = load_public_model(model, device=device, dtype=dtype)
    net: Any = lm.model if adapter is None else PeftModel.from_pretrained(lm.model, adapter).eval()
    e = measure_exposure(net, lm.tokenizer, canary, prefix, max_rows, progress=not as_json)
    if as_json:
        emit_json({**e.__dict__, **lm.placement.describe()})
        return
    typer.echo(
        f"canary {prefix}{canary}: rank {e.rank:,} of {e.candidates:,}; exposure {e.exposure:.2f} (max {e.max_exposure:.2f})"
    )
