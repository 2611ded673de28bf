"""``privlm quickstart``: the main job for now (what ``make demo`` runs).

1. Load the default public model (converting its GGUF once).
2. Its perplexity on a WikiText-2 validation slice, with a progress bar.
3. A DP-SGD budget example on WikiText-2 train: ε of a plan under both accountants, the σ
   for target ε, and a ledger that charges the run and refuses a second one.
"""

from __future__ import annotations

import math
import tempfile
import time
from pathlib import Path
from typing import Any

import typer

from privlm.accounting import (
    Budget,
    Charge,
    PrivacyLedger,
    calibrate_noise_multiplier,
    dpsgd_epsilon,
)
from privlm.cli.common import JSON_OPTION, emit_json, user_errors
from privlm.data import corpora
from privlm.errors import BudgetExceededError
from privlm.models import DEFAULT_MODEL, load_public_model, perplexity


def budget_example(n_units: int, batch_size: int = 256, epochs: int = 3) -> dict[str, Any]:
    """ε and σ for a DP-SGD plan over ``n_units`` records, and a ledger that enforces it."""
    q = batch_size / n_units
    steps = math.ceil(epochs / q)
    delta = 1.0 / n_units**1.1
    plan: dict[str, Any] = {
        "n_units": n_units,
        "batch_size": batch_size,
        "epochs": epochs,
        "sample_rate": q,
        "steps": steps,
        "delta": delta,
    }
    plan["epsilon_at_sigma_1"] = {
        acc: dpsgd_epsilon(1.0, q, steps, delta, acc).epsilon for acc in ("rdp", "prv")
    }
    plan["sigma_for_epsilon"] = {
        str(eps): {
            acc: calibrate_noise_multiplier(eps, delta, q, steps, acc).noise_multiplier
            for acc in ("rdp", "prv")
        }
        for eps in (3.0, 8.0)
    }
    sigma = plan["sigma_for_epsilon"]["8.0"]["rdp"]
    with tempfile.TemporaryDirectory() as tmp:
        ledger = PrivacyLedger(Path(tmp) / "ledger.db", "quickstart", Budget(8.0, delta))
        from privlm.accounting import DpSgdPlan

        run = Charge(
            "dpsgd",
            rdp=DpSgdPlan(sigma, q, steps).rdp_curve(),
            params={"noise_multiplier": sigma, "sample_rate": q, "steps": steps},
        )
        first = ledger.charge(run)
        try:
            ledger.charge(run)
            refusal = None
        except BudgetExceededError as exc:
            refusal = str(exc)
        plan["ledger"] = {
            "first_run_spent_epsilon": first.epsilon,
            "second_run_refused": refusal,
            "charges_recorded": len(ledger.charges()),
        }
        ledger.close()
    return plan


@user_errors
def quickstart(
    model: str = typer.Option(DEFAULT_MODEL, help="Public model: name, HF id or directory."),
    blocks: int = typer.Option(16, help="WikiText-2 validation blocks to score."),
    block_size: int = typer.Option(512, help="Tokens per block."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Load the public model, report its WikiText-2 perplexity, show a DP-SGD budget."""
    say = (lambda *_: None) if as_json else typer.echo
    say(f"[1/3] loading public model {model!r} (the first run converts and caches it)")
    t0 = time.perf_counter()
    lm = load_public_model(model)
    n_params = sum(p.numel() for p in lm.model.parameters())
    say(
        f"      {lm.name}: {n_params / 1e6:.1f}M parameters from {lm.source} "
        f"in {time.perf_counter() - t0:.1f}s"
    )

    say(f"[2/3] perplexity on WikiText-2 validation ({blocks} blocks of {block_size} tokens)")
    valid = corpora.wikitext2("valid")
    t0 = time.perf_counter()
    ppl = perplexity(
        lm.model, lm.tokenizer, valid.texts(), block_size, blocks, progress=not as_json
    )
    ppl_seconds = time.perf_counter() - t0
    say(
        f"      perplexity {ppl.perplexity:.2f} over {ppl.tokens_scored} tokens "
        f"({ppl.tokens_scored / ppl_seconds:.0f} tokens/s)"
    )

    say("[3/3] DP-SGD budget example on WikiText-2 train (record-level privacy)")
    train_units = len(corpora.wikitext2("train").units())
    example = budget_example(train_units)
    if as_json:
        emit_json(
            {
                "model": {"name": lm.name, "source": lm.source, "parameters": n_params},
                "perplexity": {**ppl.__dict__, "seconds": ppl_seconds, "block_size": block_size},
                "dpsgd_example": example,
            }
        )
        return
    e = example
    say(
        f"      {e['n_units']} records, batch {e['batch_size']} → q = {e['sample_rate']:.5f}, "
        f"{e['epochs']} epochs = {e['steps']} steps, δ = 1/n^1.1 = {e['delta']:.3g}"
    )
    say(
        f"      at σ = 1.0: ε = {e['epsilon_at_sigma_1']['rdp']:.3f} (RDP), "
        f"{e['epsilon_at_sigma_1']['prv']:.3f} (PRV)"
    )
    for eps, sig in e["sigma_for_epsilon"].items():
        say(f"      for ε = {float(eps):g}: σ = {sig['rdp']:.4f} (RDP), {sig['prv']:.4f} (PRV)")
    led = e["ledger"]
    spent = led["first_run_spent_epsilon"]
    say(f"      ledger (budget ε = 8): first run charged, spent ε = {spent:.4f}")
    say(f"      second run: {led['second_run_refused']}")
