"""The ceiling of in-context members, before any privacy: is an ensemble of the public model
prompted with private records worth building into PMixED?

An in-context member is the public model conditioned on the records of its part (no
training). Its non-private ceiling is the perplexity of the uniform average of the members'
next-token distributions (the distribution PMixED's mixture moves towards). This measures
that ceiling on the same WikiText-2 slice and the same test tokens as bench_utility.py, next
to the baselines of this run: the public model, the LoRA ensemble of bench_utility (N = 80,
trained on the same records, read from its cache) and the model fine-tuned on all of it.

Members are made as privlm partitions: records keyed-hashed into parts of about
``--per-member`` records each; a member's prompt is its part's records, newline-joined, the
first ``--prefix-tokens`` tokens of them. Scoring every member of a 1,200-member ensemble
costs about a forward pass of the public model per member per block; ``--sample`` scores a
seeded random subset of members (their average estimates the full average's ceiling; it
says which).

With ``--private 200``, also private: PMixED at ε = 8 over an in-context ensemble of 200
members built by privlm (``ensemble train --members in-context``), ``--runs`` deployments
per sampling rate in ``--rates``, each with its own budget, on the same tokens.
``--budget-queries T`` plans each budget for T queries (default: the tokens scored), so a
slice of text measures a deployment budgeted for far more tokens (the 10^5-token row).
``--head-per-position`` keeps the members' last hidden states and applies the output layer
one position at a time, for ensembles whose block of logits does not fit in memory (1,201
rows × 127 positions × 49,152 float32 logits are 30 GB). ``--references FILE`` reads the
fine-tuned model's perplexity on the same tokens from an earlier run, after checking that
the public model's agrees, for machines without bench_utility's cached models.

Usage: python bench/bench_in_context.py [--records 1200] [--per-member 1,15] [--sample 64]
       [--private 200 --rates 1 --runs 3] [--budget-queries 100000] [--head-per-position]
       [--references bench/results/in_context.json]
Writes bench/results/in_context.json (or --out).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

sys.path.insert(0, str(Path(__file__).parent))
from bench_user_level import agreeing_perplexities

from privlm.data import Dataset, corpora
from privlm.data.partition import assign_parts, record_identities
from privlm.models import load_public_model
from privlm.models.perplexity import block_perplexity, token_blocks
from privlm.predict.config import PlainConfig
from privlm.predict.evaluate import evaluate
from privlm.predict.factory import build_predictor
from privlm.predict.loading import load_ensemble
from privlm.settings import cache_dir
from privlm.training.config import EnsembleConfig
from privlm.training.ensemble import train_ensemble

RESULTS = Path(__file__).parent / "results"
MODEL = "smollm2-135m"
KEY = "00" * 32  # a fixed partition key: the same parts every run


def member_prompts(
    records: list[Any], per_member: int, tokenizer: Any, limit: int
) -> list[list[int]]:
    """Each part's prompt tokens: records keyed-hashed (as privlm partitions record-level
    units) into len/per_member parts, newline-joined, the first ``limit`` tokens."""
    n_parts = max(1, len(records) // per_member)
    parts: list[list[str]] = [[] for _ in range(n_parts)]
    for r, part in zip(
        records, assign_parts(record_identities(records), n_parts, KEY), strict=True
    ):
        parts[part].append(r.text)
    prompts = []
    for part in parts:
        ids = tokenizer("\n".join(part) + "\n", add_special_tokens=False)["input_ids"][:limit]
        if ids:
            prompts.append(ids)
    return prompts


@torch.no_grad()
def member_log_probs(
    model: Any, prompts: list[list[int]], block: list[int], pad: int
) -> torch.Tensor:
    """(members, len(block) − 1): each member's log-probability of each next token of
    ``block`` given its prompt and the block's prefix; prompts left-padded to one length."""
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (width - len(p)) + p + block for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * (len(p) + len(block)) for p in prompts])
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
    scored = torch.log_softmax(logits[:, width - 1 : -1].double(), dim=-1)  # predicts block[0:]
    targets = torch.tensor(block)[None, :, None].expand(len(prompts), -1, 1)
    return scored.gather(-1, targets).squeeze(-1)[:, 1:]  # block[1:], as every other row


def ceiling(
    model: Any, prompts: list[list[int]], blocks: list[list[int]], pad: int, batch: int
) -> dict[str, Any]:
    """Perplexity of the members' uniform average, and of the best and mean single member."""
    nll, single = 0.0, torch.zeros(len(prompts), dtype=torch.float64)
    for block in tqdm(blocks, desc=f"in-context ×{len(prompts)}", unit="block"):
        rows = torch.cat([
            member_log_probs(model, prompts[i : i + batch], block, pad)
            for i in range(0, len(prompts), batch)
        ])  # fmt: skip
        nll -= float((torch.logsumexp(rows, dim=0) - math.log(len(prompts))).sum())
        single -= rows.sum(dim=1)
    tokens = sum(len(b) - 1 for b in blocks)
    return {
        "members_scored": len(prompts),
        "perplexity": math.exp(nll / tokens),
        "mean_member_perplexity": math.exp(float(single.mean()) / tokens),
        "best_member_perplexity": math.exp(float(single.min()) / tokens),
        "prompt_tokens_mean": sum(len(p) for p in prompts) / len(prompts),
    }


class HeadPerPosition:
    """A block's logits (rows, T, V) held as the last hidden states (rows, T, H): the output
    layer runs on one position when PMixED's teacher-forced score reads ``logits[:, t]``.
    The same arithmetic per position as the whole block's output layer, to its rounding."""

    def __init__(self, hidden: torch.Tensor, head: torch.nn.Module) -> None:
        self.hidden, self.head = hidden, head
        self.shape = (*hidden.shape[:-1], head.weight.shape[0])

    @torch.no_grad()
    def __getitem__(self, index: Any) -> torch.Tensor:
        return self.head(self.hidden[index])


class HiddenStatesEngine:
    """An in-context engine whose ``logits`` return :class:`HeadPerPosition`: the model's
    output layer is swapped for the identity during the pass (so the engine's own row
    chunking and prompt states run unchanged) and applied per position afterwards."""

    def __init__(self, engine: Any) -> None:
        self.engine, self.head = engine, engine.model.lm_head

    def logits(self, *args: Any, **kwargs: Any) -> tuple[HeadPerPosition, Any]:
        model = self.engine.model
        model.lm_head = torch.nn.Identity()
        try:
            hidden, cache = self.engine.logits(*args, **kwargs)
        finally:
            model.lm_head = self.head
        return HeadPerPosition(hidden, self.head), cache

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)


def read_references(path: Path, public: float) -> dict[str, float]:
    """Every perplexity of an earlier run on the same tokens, once its public model's agrees
    with this run's (bench_user_level's check)."""
    earlier = json.loads(path.read_text())["perplexity"]
    return agreeing_perplexities(path, earlier, public, tuple(earlier))


def private_run(
    records: list[Any], members: int, args: argparse.Namespace, blocks: list[list[int]]
) -> dict[str, Any]:
    """PMixED (ε = 8, δ = 1e-5, α = 3, T = the tokens scored, per-unit bound) over an
    in-context ensemble of ``members`` parts built by privlm, ``--runs`` deployments per
    rate, each with its own budget (bench_utility's q_sweep: one forward pass per block)."""
    from bench_utility import parse_caps, q_sweep

    data = Dataset(list(records), "wikitext2-train", unit_kind="record")
    out = cache_dir() / "bench" / f"in-context-{args.records}-{members}-{args.prefix_tokens}"
    cfg = EnsembleConfig(parts=members, members="in-context", prompt_tokens=args.prefix_tokens)
    t = time.perf_counter()
    train_ensemble(MODEL, data, out, cfg, progress=False, partition_key=KEY)
    built = time.perf_counter() - t
    loaded = load_ensemble(out, device="cpu")
    engine = HiddenStatesEngine(loaded.engine) if args.head_per_position else loaded.engine
    rates = [float(x) for x in args.rates.split(",")]
    t = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        sweep = q_sweep(
            engine, loaded.model.tokenizer, blocks, rates, args.runs, Path(tmp),
            parse_caps(args.caps), budget_queries=args.budget_queries,
        )  # fmt: skip
    return {
        "members": members, "build_seconds": built, "score_seconds": time.perf_counter() - t,
        "budget_queries": args.budget_queries or sum(len(b) - 1 for b in blocks),
        "head_per_position": args.head_per_position, "q_sweep": sweep,
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1200)
    ap.add_argument("--per-member", default="1,15", help="records per member, e.g. 1,15")
    ap.add_argument("--sample", type=int, default=64, help="members scored (seeded subset)")
    ap.add_argument("--prefix-tokens", type=int, default=256)
    ap.add_argument("--blocks", type=int, default=2)
    ap.add_argument("--block-size", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lora-n", type=int, default=80, help="bench_utility's LoRA ensemble")
    ap.add_argument(
        "--private", default="", help="members per private in-context PMixED run, e.g. 200"
    )
    ap.add_argument("--rates", default="1", help="PMixED sampling rates of the private runs")
    ap.add_argument("--runs", type=int, default=3, help="deployments per rate (own budgets)")
    ap.add_argument("--caps", default="1", help="PMixED λ caps of the private runs, e.g. 1,0.5")
    ap.add_argument(
        "--budget-queries", type=int, default=None,
        help="T each private budget is planned for (default: the tokens scored)",
    )  # fmt: skip
    ap.add_argument(
        "--head-per-position", action="store_true",
        help="apply the output layer per position (ensembles whose logits do not fit)",
    )  # fmt: skip
    ap.add_argument(
        "--references", type=Path, default=None,
        help="an earlier run's JSON on the same tokens: its fine-tuned perplexity",
    )  # fmt: skip
    ap.add_argument("--out", default="in_context.json")
    args = ap.parse_args()
    records = corpora.wikitext2("train").records[: args.records]
    lm = load_public_model(MODEL, device="cpu")
    tok = lm.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    blocks = token_blocks(
        tok, corpora.wikitext2("test").texts(), args.block_size, args.blocks
    ).tolist()
    root = cache_dir() / "bench" / f"utility-{args.records}"
    ppl: dict[str, float] = {}
    for name, directory, members in (
        ("public", root / "finetuned", "public"),
        ("finetuned", root / "finetuned", "ensemble"),
        (f"lora-ensemble-{args.lora_n}", root / f"pmixed-{args.lora_n}", "ensemble"),
    ):
        if (directory / "manifest.json").is_file():
            loaded = load_ensemble(directory)
            rep = evaluate(build_predictor(PlainConfig(members=members), loaded), blocks)
            ppl[name] = rep.perplexity
    if "public" not in ppl:  # no cached bench_utility models on this machine
        ppl["public"] = block_perplexity(lm.model, torch.tensor(blocks), progress=False).perplexity
    if args.references is not None:
        ppl = {**read_references(args.references, ppl["public"]), **ppl}
    rows = []
    for per_member in (int(x) for x in args.per_member.split(",") if x):  # '': none
        prompts = member_prompts(records, per_member, tok, args.prefix_tokens)
        chosen = random.Random(0).sample(prompts, min(args.sample, len(prompts)))
        t = time.perf_counter()
        row = ceiling(lm.model, chosen, blocks, pad, args.batch)
        row.update(
            records_per_member=per_member, members=len(prompts),
            seconds=time.perf_counter() - t,
        )  # fmt: skip
        rows.append(row)
    private = [private_run(records, int(n), args, blocks) for n in args.private.split(",") if n]
    gap = ppl["public"] - ppl["finetuned"] if "finetuned" in ppl else float("nan")
    out = {
        "model": MODEL, "train_records": args.records, "test_tokens": sum(len(b) - 1 for b in blocks),
        "prefix_tokens": args.prefix_tokens, "perplexity": ppl, "in_context": rows,
        "private": private,
    }  # fmt: skip
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / args.out).write_text(json.dumps(out, indent=2))
    for k, v in ppl.items():
        print(f"{k:<22} perplexity {v:8.3f}   gap closed {(ppl['public'] - v) / gap:6.1%}")
    for r in rows:
        print(
            f"in-context, {r['records_per_member']} record(s)/member ({r['members']} members, "
            f"{r['members_scored']} scored): perplexity {r['perplexity']:.3f}, gap closed "
            f"{(ppl['public'] - r['perplexity']) / gap:6.1%}; mean single member "
            f"{r['mean_member_perplexity']:.3f}; {r['seconds']:.0f} s"
        )
    for r in private:
        for row in r["q_sweep"]:
            print(
                f"PMixED in-context N = {r['members']} q = {row['q']:g} λ cap "
                f"{row.get('lambda_cap', 1.0):g}: radius "
                f"{row['radius']:.3f}, perplexity {row['mean']:.3f} ± {row['sd']:.3f} "
                f"({row['runs']} runs), gap closed {(ppl['public'] - row['mean']) / gap:6.1%}, "
                f"median λ {row['median_lambda']:.4f}, ε spent {row['epsilon_spent']:.3f}, "
                f"mix {row['mix_seconds_per_token']:.2f} s/token"
            )
    print(f"wrote {RESULTS / args.out}")


if __name__ == "__main__":
    main()
