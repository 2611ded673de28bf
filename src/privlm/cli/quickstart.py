"""``privlm quickstart``: the main job (what ``make demo`` runs).

1. Load the default public model (converting its GGUF once).
2. Its perplexity on a WikiText-2 validation slice, with a progress bar.
3. A DP-SGD budget example on WikiText-2 train: ε of a plan under both accountants, the σ
   for target ε, and a ledger that charges the run and refuses a second one.
4. Private prediction: train a small PMixED ensemble (N = 8 LoRA adapters on disjoint
   slices of WikiText-2 train; cached and resumable), generate privately from a prompt with
   every token charged to a ledger, and compare public and PMixED perplexity on validation.
"""

from __future__ import annotations

import hashlib
import json
import math
import tempfile
import time
from pathlib import Path
from typing import Any

import typer

from privlm.accounting.advice import suggested_delta
from privlm.cli.common import DEVICE_OPTION, DTYPE_OPTION, JSON_OPTION, emit_json, user_errors
from privlm.data import corpora
from privlm.errors import BudgetExceededError
from privlm.models import DEFAULT_MODEL
from privlm.predict.config import PMixEDConfig
from privlm.settings import cache_dir
from privlm.training.config import EnsembleConfig, LoraTrainingConfig


def budget_example(n_units: int, batch_size: int = 256, epochs: int = 3) -> dict[str, Any]:
    """ε and σ for a DP-SGD plan over ``n_units`` records, and a ledger that enforces it."""
    from privlm.accounting import (  # here: --help and errors need neither SciPy nor a ledger
        Budget,
        Charge,
        PrivacyLedger,
        calibrate_noise_multiplier,
        dpsgd_epsilon,
    )

    q = batch_size / n_units
    steps = math.ceil(epochs / q)
    delta = suggested_delta(n_units)  # DP-SGD's default δ
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
        from privlm.accounting import DpSgdPlan, Relation

        run = Charge(
            "dpsgd",
            rdp=DpSgdPlan(sigma, q, steps).rdp_curve(),
            relation=Relation.RECORD,
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


def private_pipeline(
    model: str,
    n_models: int,
    records: int,
    prompt: str,
    new_tokens: int,
    eval_blocks: int,
    eval_block_size: int,
    say: Any,
    progress: bool,
    device: str = "auto",
    dtype: str = "auto",
) -> dict[str, Any]:
    """Train an N-model PMixED ensemble, generate privately, compare perplexities."""
    from privlm.models.perplexity import token_blocks
    from privlm.predict.config import PlainConfig
    from privlm.predict.evaluate import evaluate
    from privlm.predict.factory import build_predictor
    from privlm.predict.loading import load_ensemble
    from privlm.predict.spending import budget_line
    from privlm.training.ensemble import ensemble_statistics, train_ensemble

    train = corpora.wikitext2_or_shipped_head("train")[0]
    train.records = train.records[:records]
    cfg = LoraTrainingConfig(
        epochs=1, block_size=128, batch_size=4, learning_rate=2e-3, max_blocks=16,
        device=device, dtype=dtype,
    )  # fmt: skip
    key = hashlib.sha256(json.dumps(cfg.to_dict(), sort_keys=True).encode()).hexdigest()[:8]
    name = f"{model.replace('/', '_')}-pmixed-{n_models}-{records}-{key}"
    out_dir = cache_dir() / "quickstart" / name
    t0 = time.perf_counter()
    train_ensemble(
        model, train, out_dir, EnsembleConfig(parts=n_models, training=cfg), progress=progress
    )
    adapters = ensemble_statistics(out_dir).get("adapters", {})
    train_seconds = sum(a.get("seconds", 0.0) for a in adapters.values())
    say(
        f"      {n_models} adapters (rank {cfg.rank}, α {cfg.alpha:g}) on {records} records in {out_dir}"
    )
    say(
        f"      training time {train_seconds:.0f}s (this run: {time.perf_counter() - t0:.0f}s; reruns reuse it)"
    )

    loaded = load_ensemble(out_dir, device, dtype)
    lm = loaded.model
    q = min(1.0, 2.4 / n_models)  # about as many models per query as the paper's N=80, q=0.03
    config = PMixEDConfig(sample_rate=q)  # the defaults (PMixED Table 1) but q
    with tempfile.TemporaryDirectory() as tmp:
        pm = build_predictor(config, loaded, ledger=Path(tmp) / "deploy.db", name="quickstart")
        t0 = time.perf_counter()
        gen = pm.generate(prompt, max_new_tokens=new_tokens)
        gen_seconds = time.perf_counter() - t0
        say(f"      prompt: {prompt!r}")
        say(f"      PMixED: {prompt}{gen.text}")
        say(
            f"      {len(gen.token_ids)} private tokens in {gen_seconds:.1f}s; ledger: "
            f"{budget_line(pm.budget())}"
        )

        blocks = token_blocks(
            lm.tokenizer,
            corpora.wikitext2_or_shipped_head("valid")[0].texts(),
            eval_block_size,
            eval_blocks,
        ).tolist()
        public = evaluate(build_predictor(PlainConfig(members="public"), loaded), blocks, progress)
        ensemble = evaluate(
            build_predictor(PlainConfig(members="ensemble"), loaded), blocks, progress
        )
        scorer = build_predictor(config, loaded, ledger=Path(tmp) / "eval.db", name="eval")
        private = evaluate(scorer, blocks, progress=progress)
        eval_spent = scorer.budget()["spent"]["epsilon"]
    say(
        f"      validation perplexity over {public.tokens} tokens: public {public.perplexity:.2f}, "
        f"ensemble (non-private) {ensemble.perplexity:.2f}, PMixED {private.perplexity:.2f} "
        f"(ε {eval_spent:.3f}, q = {q:.2f}, N = {n_models})"
    )
    return {
        "ensemble_dir": str(out_dir),
        "n_models": n_models,
        "train_records": records,
        "train_seconds": train_seconds,
        "sample_rate": q,
        "prompt": prompt,
        "generation": gen.text,
        "generated_tokens": len(gen.token_ids),
        "generation_seconds": gen_seconds,
        "generation_epsilon": gen.epsilon_spent,
        "eval_tokens": public.tokens,
        "perplexity": {
            "public": public.perplexity,
            "ensemble": ensemble.perplexity,
            "pmixed": private.perplexity,
        },
        "eval_epsilon": eval_spent,
    }


@user_errors
def quickstart(
    model: str = typer.Option(DEFAULT_MODEL, help="Public model: name, HF id or directory."),
    blocks: int = typer.Option(16, min=1, help="WikiText-2 validation blocks to score."),
    block_size: int = typer.Option(512, min=16, max=8192, help="Tokens per block."),
    private: bool = typer.Option(True, help="Run the private-prediction pipeline (step 4)."),
    ensemble_size: int = typer.Option(8, min=2, max=1024, help="Step 4: N adapters."),
    train_records: int = typer.Option(
        480, min=2, help="Step 4: WikiText-2 train records to split."
    ),
    prompt: str = typer.Option("The history of the", help="Step 4: prompt for private generation."),
    new_tokens: int = typer.Option(
        24, min=1, max=4096, help="Step 4: tokens to generate privately."
    ),
    device: str = DEVICE_OPTION,
    dtype: str = DTYPE_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Public model and perplexity, a DP-SGD budget, then private prediction with PMixED."""
    from privlm.models import load_public_model
    from privlm.models.perplexity import perplexity

    say = (lambda *_: None) if as_json else typer.echo
    steps = 4 if private else 3
    say(f"[1/{steps}] loading public model {model!r} (the first run converts and caches it)")
    t0 = time.perf_counter()
    lm = load_public_model(model, device=device, dtype=dtype)
    n_params = sum(p.numel() for p in lm.model.parameters())
    say(
        f"      {lm.name}: {n_params / 1e6:.1f}M parameters from {lm.source} "
        f"in {time.perf_counter() - t0:.1f}s, on {lm.placement.describe()['device_name']} "
        f"in {lm.placement.describe()['dtype']}"
    )

    valid, shipped = corpora.wikitext2_or_shipped_head("valid")
    if shipped:
        say(
            "      (no corpora under PRIVLM_DATA: using the head of WikiText-2 that ships with "
            "privlm, 2,000 train and 400 validation lines; docs/data.md)"
        )
    say(f"[2/{steps}] perplexity on WikiText-2 validation ({blocks} blocks of {block_size} tokens)")
    t0 = time.perf_counter()
    ppl = perplexity(
        lm.model, lm.tokenizer, valid.texts(), block_size, blocks, progress=not as_json
    )
    ppl_seconds = time.perf_counter() - t0
    say(
        f"      perplexity {ppl.perplexity:.2f} over {ppl.tokens_scored} tokens "
        f"({ppl.tokens_scored / ppl_seconds:.0f} tokens/s)"
    )

    say(f"[3/{steps}] DP-SGD budget example on WikiText-2 train (record-level privacy)")
    train_units = len(corpora.wikitext2_or_shipped_head("train")[0].units())
    example = budget_example(train_units)
    e = example
    say(
        f"      {e['n_units']} records, batch {e['batch_size']} → q = {e['sample_rate']:.5f}, "
        f"{e['epochs']} epochs = {e['steps']} steps, δ = min(1/n^1.1, 1e-6) = {e['delta']:.3g}"
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
    result: dict[str, Any] = {
        "model": {"name": lm.name, "source": lm.source, "parameters": n_params},
        **lm.placement.describe(),
        "perplexity": {**ppl.__dict__, "seconds": ppl_seconds, "block_size": block_size},
        "dpsgd_example": example,
    }
    if private:
        say(
            f"[4/{steps}] private prediction: PMixED over an ensemble of {ensemble_size} LoRA adapters"
        )
        result["private_prediction"] = private_pipeline(
            model, ensemble_size, train_records, prompt, new_tokens, 2, 128, say, not as_json,
            device, dtype,
        )  # fmt: skip
    if as_json:
        emit_json(result)
