"""``privlm generate`` and ``privlm eval ppl``: private prediction from a trained ensemble,
and held-out perplexity of an ensemble, an adapter or the public model on any text."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from privlm.cli.common import (
    DEVICE_OPTION,
    DTYPE_OPTION,
    JSON_OPTION,
    NO_HEADER_OPTION,
    SEED_OPTION,
    TEXT_COLUMN_OPTION,
    emit_json,
    user_errors,
    warn_if_seeded,
)
from privlm.cli.mechanism_options import mechanism_options
from privlm.errors import PrivlmError
from privlm.predict.budget_names import BUDGETS, record_budget, second_budget_warning
from privlm.predict.config import BASELINES

if TYPE_CHECKING:
    from privlm.predict.protocol import Predictor

METHOD_HELP = "A registered private mechanism (privlm.predict.mechanisms): {}."


def eval_app() -> typer.Typer:
    """``privlm eval``, its options generated from the mechanisms registered now."""
    app = typer.Typer(help="Evaluate private prediction.", no_args_is_help=True)
    app.command("ppl")(mechanism_options("settings")(eval_ppl))
    return app


def generate_command() -> Any:
    """``privlm generate``, its options generated from the mechanisms registered now."""
    return mechanism_options("settings")(generate)


@user_errors
def generate(
    ensemble: Path = typer.Argument(..., help="A directory made by `privlm ensemble train`."),
    prompt: str = typer.Option(..., help="The query context."),
    method: str = typer.Option(
        "pmixed", help="The private mechanism: a registered one (pmixed, screened, submix, …)."
    ),
    ledger: Path = typer.Option(Path("privlm-ledger.db"), help="The budget ledger (SQLite)."),
    name: str = typer.Option("default", help="Ledger (deployment) name."),
    settings: dict[str, Any] | None = None,
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
    from privlm.training.manifest import load_manifest

    load_manifest(ensemble)  # a missing or partial ensemble refused before the heavy imports
    from privlm.predict.factory import build_predictor
    from privlm.predict.loading import load_ensemble
    from privlm.predict.mechanisms import private_mechanism
    from privlm.predict.spending import budget_line

    warn_if_seeded(seed)
    config = private_mechanism(method).serving_config(settings)
    loaded = load_ensemble(ensemble, device, dtype)
    predictor = build_predictor(config, loaded, ledger=ledger, name=name, seed=seed)
    _warn_of_a_second_budget(ensemble, ledger, name)
    gen = predictor.generate(
        prompt, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p, greedy=greedy
    )
    if as_json:
        emit_json(
            {
                "method": method,
                **gen.__dict__,
                **predictor.rng.statement(),
                **loaded.model.placement.describe(),
            }
        )
        return
    typer.echo(prompt + gen.text)
    free = gen.extra.get("free_tokens")
    screen = f" ({free} free, {gen.extra['paid_tokens']} paid)" if free is not None else ""
    typer.echo(
        f"-- {len(gen.token_ids)} tokens{screen}; {budget_line(predictor.budget())}", err=True
    )
    if gen.stopped:
        typer.echo(f"-- {gen.stopped}", err=True)


def _held_out_texts(data: str, records: str, text_column: str, no_header: bool) -> list[str]:
    """``data``'s texts; the default, WikiText-2's validation split, falls back to the head
    of it that ships with privlm where the corpora are absent (as the quickstart does)."""
    from privlm.cli.ensemble import load_training_data

    if data == "wikitext2:valid" and not Path(data).exists():
        from privlm.data import corpora

        valid, shipped = corpora.wikitext2_or_shipped_head("valid")
        if shipped:
            typer.echo(
                "note: no corpora under PRIVLM_DATA: scoring the head of WikiText-2's "
                "validation split that ships with privlm (privlm data fetch wikitext2 for all)",
                err=True,
            )
        return valid.texts()
    return load_training_data(
        data, None, records, text_column=text_column, no_header=no_header
    ).texts()


def _warn_of_a_second_budget(ensemble: Path, ledger: Path, name: str) -> None:
    """Record the budget this ensemble is deployed under; warn if it had another."""
    try:
        others = record_budget(ensemble, ledger, name)
    except OSError as exc:
        typer.echo(
            f"warning: could not record this ledger in {ensemble / BUDGETS} ({exc}); privlm "
            "cannot warn when another ledger name starts a second budget for this data",
            err=True,
        )
        return
    if others:
        typer.echo(f"warning: {second_budget_warning(ensemble, others)}", err=True)


@user_errors
def eval_ppl(
    method: str | None = typer.Option(
        None,
        help=f"With --ensemble: a baseline ({', '.join(BASELINES)}) or a registered private "
        "mechanism (pmixed, screened, submix, …). Without: the public model, or the "
        "--adapter-dir adapter.",
    ),
    ensemble: Path | None = typer.Option(None, help="A directory made by `privlm ensemble train`."),
    adapter_dir: Path | None = typer.Option(
        None, "--adapter-dir", help="A LoRA adapter made by `privlm train dpsgd` or `train jft`."
    ),
    data: str = typer.Option(
        "wikitext2:valid",
        "--data",
        help="Held-out text: your .txt/.jsonl/.csv file (.gz too), or wikitext2[:split].",
    ),
    text_column: str = TEXT_COLUMN_OPTION,
    no_header: bool = NO_HEADER_OPTION,
    records: str = typer.Option("line", help=".txt only: 'line' or 'block' records."),
    model: str | None = typer.Option(
        None, help="Public model (default: the ensemble's or adapter's, else SmolLM2-135M)."
    ),
    blocks: int | None = typer.Option(
        None, help="Held-out blocks to score (default 4 of WikiText-2, all of a file)."
    ),
    block_size: int = typer.Option(128, help="Tokens per block."),
    runs: int = typer.Option(1, help="Average over runs (private methods are random)."),
    settings: dict[str, Any] | None = None,
    adapter: int = typer.Option(0, help="finetuned: which adapter of the ensemble."),
    seed: int | None = typer.Option(None, help="Seed of the first run (experiments only)."),
    device: str = DEVICE_OPTION,
    dtype: str = DTYPE_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Held-out perplexity of an ensemble's methods, one LoRA adapter, or the public model, on
    WikiText-2 or your own file. For private methods every token is one query (T = tokens)."""
    from privlm.training.manifest import load_manifest

    if ensemble is not None:
        load_manifest(ensemble)  # refused before the heavy imports
    texts = _held_out_texts(data, records, text_column, no_header)
    if blocks is None:
        blocks = 4 if data.startswith("wikitext2") and not Path(data).exists() else None
    if ensemble is None:
        out = _single_model_ppl(method, adapter_dir, model, texts, data, blocks, block_size,
                                device, dtype, as_json)  # fmt: skip
    else:
        if adapter_dir is not None or model is not None:
            raise PrivlmError(
                "--ensemble brings its own model and adapters: drop --adapter-dir/--model"
            )
        if method is None:
            raise PrivlmError(
                f"with --ensemble, name a --method: {', '.join(BASELINES)} or a mechanism"
            )
        out = _ensemble_ppl(method, ensemble, texts, data, blocks, block_size, runs,
                            settings or {}, adapter, seed, device, dtype, as_json)  # fmt: skip
    if as_json:
        emit_json(out)
        return
    spent = out["runs"][-1]["epsilon_spent"]
    typer.echo(
        f"{out['method']}: perplexity {out['perplexity']:.3f} over {out['queries_per_run']} "
        f"tokens of {data} × {len(out['runs'])} run(s); ε spent per run {spent:.4g}"
    )


def _blocks_of(tokenizer: Any, texts: list[str], data: str, block_size: int,
               blocks: int | None) -> Any:  # fmt: skip
    """The held-out token blocks, (blocks, block_size), or an error naming the data."""
    from privlm.models.perplexity import token_blocks

    try:
        return token_blocks(tokenizer, texts, block_size, blocks)
    except ValueError:
        raise PrivlmError(
            f"{data}: not enough text for one block of {block_size} tokens; lower --block-size"
        ) from None


def _single_model_ppl(
    method: str | None,
    adapter_dir: Path | None,
    model: str | None,
    texts: list[str],
    data: str,
    blocks: int | None,
    block_size: int,
    device: str,
    dtype: str,
    as_json: bool,
) -> dict[str, Any]:
    """The public model, or one LoRA adapter on it (no privacy cost: nothing is released
    but the perplexity of data the caller holds)."""
    from privlm.models import DEFAULT_MODEL, load_public_model
    from privlm.models.perplexity import block_perplexity

    expected = "public" if adapter_dir is None else "finetuned"
    if method not in (None, expected):
        raise PrivlmError(
            f"--method {method} needs --ensemble; without one, privlm scores "
            + ("the public model" if adapter_dir is None else "the adapter")
        )
    if adapter_dir is not None:
        model = model or _adapter_model(adapter_dir)
    lm = load_public_model(model or DEFAULT_MODEL, device=device, dtype=dtype)
    net: Any = lm.model
    if adapter_dir is not None:
        from peft import PeftModel

        net = PeftModel.from_pretrained(lm.model, adapter_dir).eval()
    ids = _blocks_of(lm.tokenizer, texts, data, block_size, blocks)
    res = block_perplexity(net, ids, progress=not as_json)
    return {
        "method": expected,
        "model": lm.name,
        "adapter": None if adapter_dir is None else str(adapter_dir),
        "data": data,
        "queries_per_run": res.tokens_scored,
        "blocks": res.blocks,
        "runs": [{"perplexity": res.perplexity, "tokens": res.tokens_scored, "epsilon_spent": 0.0}],
        "perplexity": res.perplexity,
        **lm.placement.describe(),
    }


def _adapter_model(adapter_dir: Path) -> str | None:
    """The public model an adapter was trained on (its privacy.json says), if it says; a
    prompt adapter is refused (prompt eval scores it)."""
    import json

    config = adapter_dir / "adapter_config.json"
    if not config.is_file():
        raise PrivlmError(f"{adapter_dir}: not an adapter directory (no adapter_config.json)")
    peft_type = json.loads(config.read_text()).get("peft_type")
    if peft_type != "LORA":
        raise PrivlmError(
            f"{adapter_dir}: a {peft_type} adapter; eval ppl scores LoRA adapters (a prompt "
            "adapter is scored by `privlm prompt` on its task)"
        )
    statement = adapter_dir / "privacy.json"
    if statement.is_file():
        model: str | None = json.loads(statement.read_text()).get("model")
        return model
    return None


def _spent(predictor: Predictor) -> float:
    """What a run spent: ε for PMixED, the largest part's RDP ε for SubMix, 0 otherwise."""
    spent = predictor.budget().get("spent", {})
    return float(spent.get("epsilon", spent.get("rdp_epsilon", 0.0)))


def _queries_used(predictor: Predictor) -> dict[str, Any]:
    """The charged queries a run used, where the mechanism counts them (screened PMixED:
    its paid tokens; the others were free)."""
    queries = predictor.budget().get("queries")
    return {} if queries is None else {"queries_used": queries["used"]}


def _ensemble_ppl(
    method: str,
    ensemble: Path,
    texts: list[str],
    data: str,
    blocks: int | None,
    block_size: int,
    runs: int,
    settings: dict[str, Any],
    adapter: int,
    seed: int | None,
    device: str,
    dtype: str,
    as_json: bool,
) -> dict[str, Any]:
    import tempfile

    from privlm.predict.config import PredictorConfig
    from privlm.predict.evaluate import evaluate
    from privlm.predict.factory import build_predictor, plain_config
    from privlm.predict.loading import load_ensemble
    from privlm.predict.mechanisms import private_mechanism

    loaded = load_ensemble(ensemble, device, dtype)  # once, for every run and method
    lm, manifest = loaded.model, loaded.manifest
    assert manifest is not None
    ids = _blocks_of(lm.tokenizer, texts, data, block_size, blocks).tolist()
    queries = sum(len(b) - 1 for b in ids)
    config: PredictorConfig
    if method in BASELINES:
        given = sorted(k for k, v in settings.items() if v is not None)
        if given:
            raise PrivlmError(
                f"--{given[0].replace('_', '-')} is a mechanism's; {method} takes none"
            )
        config = plain_config(method, adapter)
    else:  # every scored token is one query: T is the tokens scored
        config = private_mechanism(method).make_config(settings, {"queries": queries})
    reports = []
    for r in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            predictor = build_predictor(
                config, loaded, ledger=Path(tmp) / "eval.db", name=f"eval-run-{r}",
                seed=None if seed is None else seed + r,
            )  # fmt: skip
            rep = evaluate(predictor, ids, progress=not as_json)
            spent = _spent(predictor)
        reports.append({**rep.__dict__, "epsilon_spent": spent, **_queries_used(predictor)})
    return {
        "method": method,
        "model": manifest.model,
        "ensemble": str(ensemble),
        "data": data,
        "queries_per_run": queries,
        "runs": reports,
        "perplexity": sum(r["perplexity"] for r in reports) / len(reports),
        **lm.placement.describe(),
    }
