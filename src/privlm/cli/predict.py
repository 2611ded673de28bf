"""``privlm generate`` and ``privlm eval ppl``: private prediction from a trained ensemble."""

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
from privlm.data import corpora
from privlm.models.perplexity import token_blocks
from privlm.predict.evaluate import METHODS, evaluate
from privlm.predict.factory import build_predictor
from privlm.predict.loading import load_ensemble

eval_app = typer.Typer(help="Evaluate private prediction.", no_args_is_help=True)


def generate(
    ensemble: Path = typer.Argument(..., help="A directory made by `privlm ensemble train`."),
    prompt: str = typer.Option(..., help="The query context."),
    method: str = typer.Option("pmixed", help="pmixed or submix."),
    ledger: Path = typer.Option(Path("privlm-ledger.db"), help="The budget ledger (SQLite)."),
    name: str = typer.Option("default", help="Ledger (deployment) name."),
    epsilon: float = typer.Option(8.0, help="PMixED: ε_G at δ; SubMix: ε per part at order α."),
    delta: float = typer.Option(1e-5, help="δ."),
    alpha: int = typer.Option(3, help="Rényi order α."),
    queries: int = typer.Option(1024, help="T, private queries over the budget's life."),
    sample_rate: float = typer.Option(0.03, help="PMixED: Poisson sampling rate q."),
    beta: float | None = typer.Option(None, help="SubMix: target leakage β (default ε/T)."),
    max_new_tokens: int = typer.Option(32, help="Tokens to generate."),
    seed: int | None = SEED_OPTION,
    temperature: float | None = typer.Option(
        None, help="Refused: only ancestral sampling is private."
    ),
    top_k: int | None = typer.Option(None, help="Refused: only ancestral sampling is private."),
    top_p: float | None = typer.Option(None, help="Refused: only ancestral sampling is private."),
    greedy: bool = typer.Option(False, help="Refused: only ancestral sampling is private."),
    device: str = DEVICE_OPTION,
    dtype: str = DTYPE_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Generate text privately; every released token is charged to the ledger first."""
    warn_if_seeded(seed)
    loaded = load_ensemble(ensemble, device, dtype)
    predictor = build_predictor(
        method,
        ensemble,
        loaded,
        ledger,
        name,
        epsilon,
        delta,
        alpha,
        queries,
        sample_rate,
        beta,
        seed,
    )
    gen = predictor.generate(
        prompt, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p, greedy=greedy
    )
    if as_json:
        emit_json(
            {
                "method": method,
                **gen.__dict__,
                **predictor.rng.statement(),
                **loaded[0].placement.describe(),
            }
        )
        return
    typer.echo(prompt + gen.text)
    typer.echo(
        f"-- {len(gen.token_ids)} tokens; ε spent {gen.epsilon_spent:.4g}; queries used {gen.queries_used}",
        err=True,
    )
    if gen.stopped:
        typer.echo(f"-- {gen.stopped}", err=True)


@eval_app.command("ppl")
@user_errors
def eval_ppl(
    method: str = typer.Option(..., help=f"One of {', '.join(METHODS)}."),
    ensemble: Path = typer.Option(..., help="A directory made by `privlm ensemble train`."),
    blocks: int = typer.Option(4, help="Held-out WikiText-2 validation blocks."),
    block_size: int = typer.Option(128, help="Tokens per block."),
    runs: int = typer.Option(1, help="Average over runs (private methods are random)."),
    epsilon: float = typer.Option(8.0, help="PMixED ε_G / SubMix ε per part."),
    delta: float = typer.Option(1e-5, help="δ."),
    alpha: int = typer.Option(3, help="Rényi order α."),
    sample_rate: float = typer.Option(0.03, help="PMixED q."),
    beta: float | None = typer.Option(None, help="SubMix β (default ε/T)."),
    adapter: int = typer.Option(0, help="finetuned: which adapter."),
    seed: int | None = typer.Option(None, help="Seed of the first run (experiments only)."),
    device: str = DEVICE_OPTION,
    dtype: str = DTYPE_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Test-set perplexity; for private methods every token is one query (T = tokens scored)."""
    import tempfile

    loaded = load_ensemble(ensemble, device, dtype)  # once, for every run and method
    lm, engine, manifest = loaded
    valid = corpora.wikitext2("valid")
    ids = token_blocks(lm.tokenizer, valid.texts(), block_size, blocks).tolist()
    queries = sum(len(b) - 1 for b in ids)
    reports = []
    for r in range(runs):
        predictor = None
        if method in ("pmixed", "submix"):
            with tempfile.TemporaryDirectory() as tmp:
                predictor = build_predictor(
                    method,
                    ensemble,
                    loaded,
                    Path(tmp) / "eval.db",
                    f"eval-run-{r}",
                    epsilon,
                    delta,
                    alpha,
                    queries,
                    sample_rate,
                    beta,
                    None if seed is None else seed + r,
                )
                rep = evaluate(method, ids, engine, predictor, adapter, progress=not as_json)
                spent = (
                    predictor.ledger.spent().epsilon
                    if method == "pmixed"
                    else max(lg.spent().epsilon for lg in predictor.ledgers)
                )
        else:
            rep = evaluate(method, ids, engine, None, adapter, progress=not as_json)
            spent = 0.0
        reports.append({**rep.__dict__, "epsilon_spent": spent})
    mean = sum(r["perplexity"] for r in reports) / len(reports)
    out = {
        "method": method,
        "model": manifest["model"],
        "ensemble": str(ensemble),
        "queries_per_run": queries,
        "runs": reports,
        "perplexity": mean,
        **lm.placement.describe(),
    }
    if as_json:
        emit_json(out)
        return
    typer.echo(
        f"{method}: perplexity {mean:.3f} over {queries} tokens × {runs} run(s); "
        f"ε spent per run {reports[-1]['epsilon_spent']:.4g}"
    )
