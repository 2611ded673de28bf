"""GPU benchmarks at real model sizes, every figure beside a baseline from the
same run.

Models are randomly initialised at the real configurations in ``bench/configs/*.json``
(SmolLM2-135M, Llama-3.2-1B, Llama-3.1-8B): speed does not depend on the weights, so no
weights are downloaded. Text goes through ``WordTokenizer``, a hashing tokenizer made for
these random models (words, digits and punctuation map to fixed ids in the vocabulary).

Sections, each in its own process (clean peak-memory figures, no state carried over):

- ``pmixed``: PMixED decoding, N adapters (rank 8, every projection), rate q, ``--tokens``
  tokens after a ``--prompt``-token prompt; per token against the public model alone and
  against a sequential per-adapter PEFT loop (``--loop-tokens`` tokens of it);
  ``--compare-gather`` also times the engine's general LoRA path (stacks gathered at every
  projection), alternating with the block path that PMixED's row layout takes.
- ``submix``: SubMix with k parts (2k adapters), against the public model alone.
- ``dpsgd``: one DP-SGD LoRA step (Opacus hooks and ghost modes) against the same
  non-private step: seconds, tokens/s and peak GPU memory.
- ``exposure``: canary exposure over 10^d candidates (the prefix tree, batched).
- ``pate``: PromptPATE teacher labelling, T teachers: public queries labelled per second.
- ``in_context``: in-context PMixED (q = 1), N members of ``--member-tokens`` prompt tokens,
  with and without a λ cap of 0.5: tokens/s and peak memory against the public model alone.
- ``synth``: ``privlm synth`` (PMixED and DClip), ``--count`` texts of ``--max-tokens``
  tokens: tokens/s and peak memory against non-private KV-cached generation.

Usage (on a GPU):
    python bench/bench_gpu.py                       # every section at its issue's sizes
    python bench/bench_gpu.py --sections pmixed --models llama-3.2-1b
    python bench/bench_gpu.py --device cpu --models tiny-llama --quick   # a smoke run
Writes bench/results/gpu.json (or --out).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from statistics import median
from types import SimpleNamespace
from typing import Any
from unittest.mock import patch

import torch

ROOT = Path(__file__).parent
CONFIGS = ROOT / "configs"
RESULTS = ROOT / "results"
SECTIONS = ("pmixed", "submix", "dpsgd", "exposure", "pate", "in_context", "synth")
# the sizes each section runs at by default
DEFAULT_MODELS = {
    "pmixed": ["llama-3.2-1b", "llama-3.1-8b", "smollm2-135m"],
    "submix": ["llama-3.2-1b", "llama-3.1-8b"],
    "dpsgd": ["llama-3.2-1b", "llama-3.1-8b"],
    "exposure": ["llama-3.2-1b"],
    "pate": ["llama-3.2-1b"],
    "in_context": ["llama-3.2-1b"],
    "synth": ["llama-3.2-1b"],
}
TARGETS = {
    "pmixed_over_public": 1.5,  # at most, at 1B and 8B
    "loop_over_pmixed": 20.0,  # at least
    "dpsgd_hooks_over_nonprivate_8b": 1.3,
    "dpsgd_memory_over_nonprivate_8b": 1.2,
    "exposure_seconds_1e6_1b": 60.0,
}


class WordTokenizer:
    """Hashes words (with their leading space), single digits and punctuation to ids in
    ``[1, vocab)``: what the random models need of a tokenizer. Digits are single tokens and
    never merge with a space, as the exposure audit requires."""

    PATTERN = re.compile(r" ?[A-Za-z]+|\d|\s|[^\sA-Za-z\d]")

    def __init__(self, vocab: int) -> None:
        self.vocab = vocab
        self.eos_token_id = None  # never sampled: every generation runs its full length
        self.pad_token_id = 0

    def __call__(self, text: str, add_special_tokens: bool = False, **_: Any) -> dict[str, Any]:
        ids = [1 + zlib.crc32(t.encode()) % (self.vocab - 1) for t in self.PATTERN.findall(text)]
        return {"input_ids": ids}

    def decode(self, ids: list[int], **_: Any) -> str:
        return ""


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_memory(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


def device_info(device: torch.device) -> dict[str, Any]:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return {"device": str(device), "device_name": name, "torch": torch.__version__}


def build_model(name: str, device: torch.device, dtype: torch.dtype) -> Any:
    """A randomly initialised causal LM at the configuration ``configs/NAME.json``."""
    from transformers import AutoConfig, AutoModelForCausalLM

    raw = json.loads((CONFIGS / f"{name}.json").read_text())
    config = AutoConfig.for_model(raw.pop("model_type"), **raw)
    with device:
        model = AutoModelForCausalLM.from_config(config, torch_dtype=dtype)
    return model.eval()


def random_adapters(model: Any, n: int, rank: int) -> tuple[list[dict], Any]:
    """N random LoRA adapters on every projection privlm discovers, on the model's device."""
    from privlm.predict.engine import AdapterSpec
    from privlm.training.lora_targets import discover_lora_targets

    targets = discover_lora_targets(model)
    names = [n_ for n_, m in model.named_modules() if n_.rsplit(".", 1)[-1] in targets]
    p = next(model.parameters())
    adapters = []
    for _ in range(n):
        ad = {}
        for name in names:
            mod = model.get_submodule(name)
            a = torch.randn(rank, mod.in_features, device=p.device, dtype=p.dtype) * 0.01
            b = torch.randn(mod.out_features, rank, device=p.device, dtype=p.dtype) * 0.01
            ad[name] = (a, b)
        adapters.append(ad)
    return adapters, AdapterSpec(rank, 2.0 * rank, tuple(sorted(targets)))


def prompt_text(tokens: int) -> str:
    words = [
        "the",
        "history",
        "of",
        "the",
        "city",
        "begins",
        "in",
        "an",
        "early",
        "period",
        "when",
        "a",
        "settlement",
        "grew",
    ]
    return " ".join(words[i % len(words)] for i in range(tokens))


@torch.no_grad()
def public_per_token(model: Any, ids: list[int], tokens: int) -> float:
    """KV-cached sampling from the public model alone: the floor."""
    from transformers import DynamicCache

    device = next(model.parameters()).device
    cache = DynamicCache()
    out = model(input_ids=torch.tensor([ids], device=device), past_key_values=cache, use_cache=True)
    sync(device)
    t = time.perf_counter()
    for _ in range(tokens):
        probs = torch.softmax(out.logits[:, -1].double(), -1)
        tok = torch.multinomial(probs, 1)
        out = model(input_ids=tok, past_key_values=cache, use_cache=True)
    sync(device)
    return (time.perf_counter() - t) / tokens


@torch.no_grad()
def loop_per_token(model: Any, n: int, rank: int, ids: list[int], tokens: int) -> float:
    """The reference implementations' way: PEFT ``set_adapter`` and a forward pass per
    adapter (each with its own KV cache), plus the public model, per token."""
    from peft import LoraConfig, get_peft_model
    from transformers import DynamicCache

    from privlm.training.lora_targets import discover_lora_targets

    cfg = LoraConfig(
        r=rank, lora_alpha=2 * rank, target_modules=discover_lora_targets(model),
        init_lora_weights=False,
    )  # fmt: skip
    t0 = time.perf_counter()
    peft = get_peft_model(model, cfg, adapter_name="a0")
    for i in range(1, n):
        peft.add_adapter(f"a{i}", cfg)
    peft.eval()
    print(f"loop: {n} PEFT adapters attached in {time.perf_counter() - t0:.1f} s", flush=True)
    device = next(model.parameters()).device
    caches = [DynamicCache() for _ in range(n + 1)]

    def step(inp: torch.Tensor) -> None:
        with peft.disable_adapter():
            peft(input_ids=inp, past_key_values=caches[0], use_cache=True)
        for i in range(n):
            peft.set_adapter(f"a{i}")
            peft(input_ids=inp, past_key_values=caches[i + 1], use_cache=True)

    t0 = time.perf_counter()
    step(torch.tensor([ids], device=device))
    sync(device)
    print(f"loop: prefill of {n + 1} caches in {time.perf_counter() - t0:.1f} s", flush=True)
    t = time.perf_counter()
    for _ in range(tokens):
        step(torch.tensor([[7]], device=device))
    sync(device)
    seconds = (time.perf_counter() - t) / tokens
    peft.unload()  # the base model, unwrapped, for the next measurement
    return seconds


def section_pmixed(model_name: str, args: argparse.Namespace) -> dict[str, Any]:
    from privlm.accounting import Budget, PrivacyLedger
    from privlm.predict import EnsembleEngine, PMixED, PMixEDConfig

    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    model = build_model(model_name, device, dtype)
    tok = WordTokenizer(model.config.vocab_size)
    text = prompt_text(args.prompt)
    ids = tok(text)["input_ids"]
    publics = settled(lambda: public_per_token(model, ids, args.tokens), args.rounds)
    public = median(publics)
    loop = (  # --loop-tokens 0: no PEFT-loop baseline (it is slow at 8B)
        loop_per_token(model, args.adapters, args.rank, ids, args.loop_tokens)
        if args.loop_tokens > 0
        else None
    )
    adapters, spec = random_adapters(model, args.adapters, args.rank)
    engine = EnsembleEngine(model, adapters, spec)
    del adapters
    with tempfile.TemporaryDirectory() as tmp:
        cfg = PMixEDConfig(epsilon=8.0, delta=1e-5, alpha=3, queries=1_000_000, sample_rate=args.q)
        ledger = PrivacyLedger(Path(tmp) / "l.db", "bench", Budget(8.0, 1e-5))
        pm = PMixED(engine, tok, ledger, cfg)
        pm.generate(text, max_new_tokens=2)  # warm-up
        paths = {"block": lambda: timed_generation(pm, text, args.tokens, device)}
        if args.compare_gather:
            paths["gather"] = lambda: gathering(
                lambda: timed_generation(pm, text, args.tokens, device)
            )
        by_path = alternating(paths, args.rounds)
        runs = by_path["block"]
        # the prefill of every row, alone: a one-token generation
        first = median([r[0] for r in settled(lambda: timed_generation(pm, text, 1, device), 1)])
    per_token, n_tokens = median([r[0] for r in runs]), runs[0][1]
    decode = (per_token * n_tokens - first) / max(1, n_tokens - 1)
    gather = median([r[0] for r in by_path["gather"]]) if "gather" in by_path else None
    return {
        "model": model_name, "adapters": args.adapters, "rank": args.rank, "q": args.q,
        "prompt_tokens": len(ids), "tokens": n_tokens,
        "public_per_token_s": public, "pmixed_per_token_s": per_token,
        "rounds": args.rounds, "public_runs_s": publics, "pmixed_runs_s": [r[0] for r in runs],
        "loop_per_token_s": loop, "loop_tokens": args.loop_tokens,
        "pmixed_over_public": per_token / public, "first_token_s": first,
        "pmixed_decode_per_token_s": decode, "decode_over_public": decode / public,
        "loop_over_pmixed": loop / per_token if loop else None,
        "pmixed_gather_per_token_s": gather,
        "pmixed_gather_runs_s": [r[0] for r in by_path.get("gather", [])],
        "gather_over_block": gather / per_token if gather else None,
        "peak_memory_gib": peak_memory(device),
    }  # fmt: skip


def gathering(measure: Any) -> Any:
    """``measure()`` on the engine's general LoRA path, which gathers every adapter's A and B
    and the batch rows at each projection: privlm's only path before the block layout
    (:class:`privlm.predict.engine.AdapterBlock`), kept for any other row layout."""
    with patch("privlm.predict.engine.adapter_block", return_value=None):
        return measure()


def alternating(measures: dict[str, Any], rounds: int) -> dict[str, list[Any]]:
    """``rounds`` figures of each measure, taken in turn, after one warm-up round (dropped)."""
    runs: dict[str, list[Any]] = {name: [] for name in measures}
    for i in range(rounds + 1):
        for name, measure in measures.items():
            figure = measure()
            if i:
                runs[name].append(figure)
    return runs


def settled(measure: Any, rounds: int) -> list[Any]:
    """``rounds`` figures of ``measure()`` after one warm-up call (dropped)."""
    return [measure() for _ in range(rounds + 1)][1:]


def timed_generation(predictor: Any, text: str, tokens: int, device: torch.device) -> tuple:
    """Seconds per released token of ``predictor.generate`` and how many it released."""
    sync(device)
    t = time.perf_counter()
    gen = predictor.generate(text, max_new_tokens=tokens)
    sync(device)
    return (time.perf_counter() - t) / len(gen.token_ids), len(gen.token_ids)


def member_prompts(tok: WordTokenizer, members: int, tokens: int) -> list[list[int]]:
    """``members`` distinct prompts of ``tokens`` tokens each (rotated word lists)."""
    words = prompt_text(tokens + members).split()
    return [tok(" ".join(words[i : i + tokens]))["input_ids"][:tokens] for i in range(members)]


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def section_in_context(model_name: str, args: argparse.Namespace) -> dict[str, Any]:
    """In-context PMixED (q = 1): N members, each the public model prompted with
    ``--member-tokens`` tokens, against the public model alone; with and without a λ cap."""
    from privlm.accounting import Budget, PrivacyLedger
    from privlm.predict import PMixED, PMixEDConfig
    from privlm.predict.in_context import InContextEngine

    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    model = build_model(model_name, device, dtype)
    tok = WordTokenizer(model.config.vocab_size)
    text = prompt_text(args.prompt)
    ids = tok(text)["input_ids"]
    reset_peak(device)
    public = median(settled(lambda: public_per_token(model, ids, args.tokens), args.rounds))
    public_peak = peak_memory(device)
    rows = []
    caps = (1.0, 0.5)
    for n in (int(x) for x in str(args.members).split(",")):
        reset_peak(device)
        engine = InContextEngine(model, member_prompts(tok, n, args.member_tokens), 0)
        runs: dict[float, list[float]] = {cap: [] for cap in caps}
        with tempfile.TemporaryDirectory() as tmp:
            predictors = {}
            for cap in caps:
                cfg = PMixEDConfig(
                    epsilon=8.0, delta=1e-5, alpha=3, queries=1024, sample_rate=1.0,
                    lambda_cap=cap,
                )  # fmt: skip
                ledger = PrivacyLedger(Path(tmp) / f"{cap}.db", "bench", Budget(8.0, 1e-5))
                predictors[cap] = PMixED(engine, tok, ledger, cfg)
                predictors[cap].generate(text, max_new_tokens=2)
            for i in range(args.rounds + 1):  # alternating; the first round is a warm-up
                for cap in caps:
                    per_token, n_tokens = timed_generation(
                        predictors[cap], text, args.tokens, device
                    )
                    if i:
                        runs[cap].append(per_token)
        for cap in caps:
            per_token = median(runs[cap])
            rows.append({
                "members": n, "lambda_cap": cap, "member_tokens": args.member_tokens,
                "tokens": n_tokens, "per_token_s": per_token, "runs_s": runs[cap],
                "tokens_per_s": 1 / per_token, "over_public": per_token / public,
                "peak_memory_gib": peak_memory(device),
            })  # fmt: skip
        del engine, predictors
    return {
        "model": model_name, "prompt_tokens": len(ids), "public_per_token_s": public,
        "public_tokens_per_s": 1 / public, "public_peak_memory_gib": public_peak, "rows": rows,
    }  # fmt: skip


def section_synth(model_name: str, args: argparse.Namespace) -> dict[str, Any]:
    """``privlm synth`` (both mechanisms) over a random-text dataset: texts per second and
    tokens per second against non-private KV-cached generation after a prompt as long as a
    member's."""
    from privlm.data.records import Dataset, Record
    from privlm.models.loading import LoadedModel
    from privlm.synth import SynthConfig, synthesize

    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    model = build_model(model_name, device, dtype)
    tok = WordTokenizer(model.config.vocab_size)
    words = prompt_text(args.member_tokens + 64).split()
    records = [
        Record(" ".join(words[i % 64 : i % 64 + args.member_tokens]), f"u{i}")
        for i in range(args.count * args.synth_members)
    ]
    lm = LoadedModel(model, tok, model_name, "random weights")  # type: ignore[arg-type]
    context = tok(prompt_text(args.member_tokens + 8))["input_ids"]
    reset_peak(device)
    public = median(settled(lambda: public_per_token(model, context, args.max_tokens), args.rounds))
    public_peak = peak_memory(device)
    runs: dict[str, list[float]] = {"pmixed": [], "dclip": []}
    reset_peak(device)
    for i in range(args.rounds + 1):  # alternating; the first round is a warm-up
        for mechanism in runs:
            cfg = SynthConfig(
                epsilon=8.0, delta=1e-5, count=args.count, max_tokens=args.max_tokens,
                members=args.synth_members, prompt_tokens=args.member_tokens,
                mechanism=mechanism, seed=0,
            )  # fmt: skip
            with tempfile.TemporaryDirectory() as tmp:
                sync(device)
                t = time.perf_counter()
                res = synthesize(lm, Dataset(records, "bench"), Path(tmp) / "s.jsonl", cfg,
                                 progress=False)  # fmt: skip
                sync(device)
                if i:
                    runs[mechanism].append(time.perf_counter() - t)
    rows = []
    tokens = res.written * args.max_tokens  # no end token: every text runs its length
    for mechanism, times in runs.items():
        seconds = median(times)
        rows.append({
            "mechanism": mechanism, "texts": res.written, "seconds": seconds, "runs_s": times,
            "tokens_per_s": tokens / seconds, "per_token_s": seconds / tokens,
            "over_public": seconds / tokens / public, "peak_memory_gib": peak_memory(device),
        })  # fmt: skip
    return {
        "model": model_name, "members": args.synth_members, "member_tokens": args.member_tokens,
        "count": args.count, "max_tokens": args.max_tokens, "public_per_token_s": public,
        "public_tokens_per_s": 1 / public, "public_peak_memory_gib": public_peak, "rows": rows,
    }  # fmt: skip


def section_submix(model_name: str, args: argparse.Namespace) -> dict[str, Any]:
    from privlm.predict import EnsembleEngine
    from privlm.predict.submix import SubMix, SubMixConfig, part_ledgers

    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    model = build_model(model_name, device, dtype)
    tok = WordTokenizer(model.config.vocab_size)
    text = prompt_text(args.prompt)
    ids = tok(text)["input_ids"]
    publics = settled(lambda: public_per_token(model, ids, args.tokens), args.rounds)
    public = median(publics)
    adapters, spec = random_adapters(model, 2 * args.parts, args.rank)
    engine = EnsembleEngine(model, adapters, spec)
    del adapters
    with tempfile.TemporaryDirectory() as tmp:
        cfg = SubMixConfig(epsilon=1000.0, alpha=2.0, beta=2.0 / 1024)  # no STOP in the timing
        sm = SubMix(engine, tok, part_ledgers(Path(tmp) / "l.db", "b", args.parts, cfg), cfg)
        sm.generate(text, max_new_tokens=2)
        runs = settled(lambda: timed_generation(sm, text, args.tokens, device), args.rounds)
    per_token = median([r[0] for r in runs])
    return {
        "model": model_name, "parts": args.parts, "adapters": 2 * args.parts, "rank": args.rank,
        "prompt_tokens": len(ids), "tokens": runs[0][1], "rounds": args.rounds,
        "public_per_token_s": public, "public_runs_s": publics, "submix_per_token_s": per_token,
        "submix_runs_s": [r[0] for r in runs],
        "submix_over_public": per_token / public, "peak_memory_gib": peak_memory(device),
    }  # fmt: skip


def section_dpsgd(model_name: str, args: argparse.Namespace) -> dict[str, Any]:
    """One mode (args.mode: nonprivate, hooks or ghost) of privlm's DP-SGD LoRA step."""
    from opacus import PrivacyEngine
    from opacus.utils.fast_gradient_clipping_utils import DPTensorFastGradientClipping
    from peft import LoraConfig, get_peft_model
    from torch.utils.data import DataLoader, TensorDataset

    from privlm.training.checkpointing import enable_gradient_checkpointing
    from privlm.training.lora_targets import discover_lora_targets
    from privlm.training.redaction import masked_lm_loss, per_example_losses

    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    model = build_model(model_name, device, dtype)
    cfg = LoraConfig(
        r=args.rank, lora_alpha=2 * args.rank, target_modules=discover_lora_targets(model),
        lora_dropout=0.0,
    )  # fmt: skip
    peft = get_peft_model(model, cfg)
    if args.checkpointing:
        enable_gradient_checkpointing(peft)
    peft.train()
    n = args.batch * (args.steps + 2)
    data = torch.randint(1, model.config.vocab_size, (n, args.length))
    loader = DataLoader(TensorDataset(data), batch_size=args.batch)
    opt = torch.optim.AdamW([p for p in peft.parameters() if p.requires_grad], lr=1e-4)
    module: Any = peft
    if args.mode != "nonprivate":
        made = PrivacyEngine().make_private(
            module=peft, optimizer=opt, data_loader=loader, noise_multiplier=1.0,
            max_grad_norm=1.0, poisson_sampling=False, grad_sample_mode=args.mode,
        )  # fmt: skip
        module, opt, loader = made[0], made[1], made[-1]
    times = []
    for i, (x,) in enumerate(loader):
        x = x.to(device)
        sync(device)
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        logits = module(input_ids=x).logits
        if args.mode == "ghost":
            DPTensorFastGradientClipping(
                module, opt, per_example_losses(logits, x), "mean"
            ).backward()
        else:
            masked_lm_loss(logits, x, per_example=args.mode == "hooks").backward()
        opt.step()
        sync(device)
        if i >= 2:  # two warm-up steps
            times.append(time.perf_counter() - t)
        if i == 1 and device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
    step = sum(times) / len(times)
    return {
        "model": model_name, "mode": args.mode, "batch": args.batch, "length": args.length,
        "rank": args.rank, "checkpointing": args.checkpointing, "steps": len(times),
        "step_s": step, "tokens_per_s": args.batch * args.length / step,
        "peak_memory_gib": peak_memory(device),
    }  # fmt: skip


def section_exposure(model_name: str, args: argparse.Namespace) -> dict[str, Any]:
    from privlm.audit.exposure import candidate_log_likelihoods, exposure_from_scores

    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    model = build_model(model_name, device, dtype)
    tok = WordTokenizer(model.config.vocab_size)
    candidate_log_likelihoods(model, tok, 2, max_rows=args.max_rows, progress=False)  # warm-up
    sync(device)
    t = time.perf_counter()
    scores = candidate_log_likelihoods(
        model, tok, args.digits, max_rows=args.max_rows, progress=False
    )
    sync(device)
    seconds = time.perf_counter() - t
    e = exposure_from_scores(scores, "3" * args.digits)
    return {
        "model": model_name, "candidates": len(scores), "max_rows": args.max_rows,
        "seconds": seconds, "candidates_per_s": len(scores) / seconds,
        "exposure_example": e.exposure, "peak_memory_gib": peak_memory(device),
    }  # fmt: skip


def section_pate(model_name: str, args: argparse.Namespace) -> dict[str, Any]:
    from privlm.data import Record
    from privlm.data.partition import new_partition_key
    from privlm.prompting.pate import make_teachers
    from privlm.prompting.pate_pipeline import teacher_answer_matrix
    from privlm.prompting.tasks import get_task

    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    model = build_model(model_name, device, dtype)
    lm = SimpleNamespace(model=model, tokenizer=WordTokenizer(model.config.vocab_size))
    task = get_task("sst2")
    words = ["a", "gripping", "film", "with", "a", "weak", "ending", "and", "fine", "acting"]
    private = [
        Record(" ".join(words[(i + j) % len(words)] for j in range(12)), f"r{i}",
               "positive" if i % 2 else "negative")
        for i in range(3 * args.teachers)
    ]  # fmt: skip
    public = [Record(" ".join(words[(i * 3 + j) % len(words)] for j in range(16)), f"p{i}")
              for i in range(args.public)]  # fmt: skip
    teachers = make_teachers(private, args.teachers, 1, new_partition_key())
    teacher_answer_matrix(lm, task, teachers[:2], public[:2], args.pate_batch, False)  # warm-up
    sync(device)
    t = time.perf_counter()
    teacher_answer_matrix(lm, task, teachers, public, args.pate_batch, False)
    sync(device)
    seconds = time.perf_counter() - t
    voting = sum(not t_.abstains for t_ in teachers)
    return {
        "model": model_name, "teachers": args.teachers, "voting_teachers": voting,
        "public_queries": args.public, "batch": args.pate_batch, "seconds": seconds,
        "queries_per_s": args.public / seconds,
        "teacher_prompts_per_s": voting * (args.public + 3) / seconds,
        "peak_memory_gib": peak_memory(device),
    }  # fmt: skip


RUN = {
    "pmixed": section_pmixed,
    "submix": section_submix,
    "dpsgd": section_dpsgd,
    "exposure": section_exposure,
    "pate": section_pate,
    "in_context": section_in_context,
    "synth": section_synth,
}


def child(args: argparse.Namespace, section: str, model: str, **extra: Any) -> dict[str, Any]:
    """Run one section for one model in a fresh process; its JSON result (or its error)."""
    cmd = [sys.executable, __file__, "--child", section, "--models", model]
    for key, value in {**vars(args), **extra}.items():
        if key in ("child", "models", "sections", "out", "quick") or value is None:
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            cmd += [flag] if value else []
        else:
            cmd += [flag, str(value)]
    t = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        tail = (res.stderr or res.stdout)[-2000:]
        print(f"  {section} {model} failed:\n{tail}", file=sys.stderr)
        return {"model": model, "error": tail.strip().splitlines()[-1] if tail.strip() else "?"}
    out = json.loads(res.stdout.strip().splitlines()[-1])
    out["wall_s"] = time.perf_counter() - t
    return out


def run_all(args: argparse.Namespace) -> dict[str, Any]:
    sections = args.sections.split(",")
    results: dict[str, Any] = {
        **device_info(torch.device(args.device)), "dtype": args.dtype, "targets": TARGETS,
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
    }  # fmt: skip
    for section in sections:
        models = args.models.split(",") if args.models else DEFAULT_MODELS[section]
        rows = []
        for model in models:
            if section == "dpsgd":
                for mode in ("nonprivate", "hooks", "ghost"):
                    rows.append(child(args, section, model, mode=mode))
                    print(json.dumps(rows[-1]))
                by = {r.get("mode"): r for r in rows if r.get("model") == model}
                base = by.get("nonprivate", {})
                for mode in ("hooks", "ghost"):
                    r = by.get(mode, {})
                    if "step_s" in r and "step_s" in base:
                        r["step_over_nonprivate"] = r["step_s"] / base["step_s"]
                        if r.get("peak_memory_gib") and base.get("peak_memory_gib"):
                            r["memory_over_nonprivate"] = (
                                r["peak_memory_gib"] / base["peak_memory_gib"]
                            )
            else:
                rows.append(child(args, section, model))
                print(json.dumps(rows[-1]))
        results[section] = rows
    return results


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sections", default=",".join(SECTIONS))
    ap.add_argument(
        "--models", default=None, help="Comma-separated configs (default: per section)."
    )
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default=None, help="Default bfloat16 on CUDA, float32 on the CPU.")
    ap.add_argument("--adapters", type=int, default=80, help="PMixED's N.")
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--q", type=float, default=0.03)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--loop-tokens", type=int, default=4, help="0: no PEFT-loop baseline.")
    ap.add_argument(
        "--compare-gather", action="store_true",
        help="PMixED: also time the general LoRA path (gathers), alternating with the block path.",
    )  # fmt: skip
    ap.add_argument("--parts", type=int, default=8, help="SubMix's k.")
    ap.add_argument("--batch", type=int, default=8, help="DP-SGD examples per step.")
    ap.add_argument("--length", type=int, default=512, help="DP-SGD tokens per example.")
    ap.add_argument("--steps", type=int, default=5, help="DP-SGD steps timed (after 2 warm-up).")
    ap.add_argument("--checkpointing", action="store_true", help="DP-SGD with checkpointing.")
    ap.add_argument("--mode", default="nonprivate", help=argparse.SUPPRESS)
    ap.add_argument("--digits", type=int, default=6, help="Exposure: 10^digits candidates.")
    ap.add_argument("--max-rows", type=int, default=100_000, help="Exposure: rows per pass.")
    ap.add_argument("--teachers", type=int, default=200)
    ap.add_argument("--public", type=int, default=100, help="PATE public queries timed.")
    ap.add_argument("--pate-batch", type=int, default=256)
    ap.add_argument("--members", default="80,400", help="In-context PMixED's N values.")
    ap.add_argument("--member-tokens", type=int, default=128, help="Tokens of a member's prompt.")
    ap.add_argument("--count", type=int, default=8, help="Synth: texts written.")
    ap.add_argument("--max-tokens", type=int, default=64, help="Synth: tokens per text.")
    ap.add_argument("--synth-members", type=int, default=16, help="Synth: members per text.")
    ap.add_argument("--rounds", type=int, default=3, help="Timed runs (median), after a warm-up.")
    ap.add_argument("--quick", action="store_true", help="Tiny sizes: a smoke run anywhere.")
    ap.add_argument("--out", type=Path, default=RESULTS / "gpu.json")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.dtype is None:
        args.dtype = "bfloat16" if args.device.startswith("cuda") else "float32"
    if args.quick:
        args.adapters, args.tokens, args.prompt, args.loop_tokens = 4, 4, 16, 2
        args.parts, args.batch, args.length, args.steps = 2, 2, 16, 2
        args.digits, args.max_rows, args.teachers, args.public = 3, 100, 6, 4
        args.pate_batch = 16
        args.members, args.member_tokens, args.count, args.max_tokens = "4,6", 8, 2, 4
        args.synth_members, args.rounds = 3, 1
    return args


def main() -> None:
    args = parse()
    if args.child:
        torch.manual_seed(0)
        print(json.dumps(RUN[args.child](args.models, args)))
        return
    results = run_all(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(f"on {results['device_name']} ({results['dtype']}); wrote {args.out}")
    for r in results.get("pmixed", []):
        if "pmixed_over_public" in r:
            print(
                f"PMixED {r['model']} N={r['adapters']} q={r['q']}: "
                f"{r['pmixed_per_token_s'] * 1e3:.1f} ms/token = {r['pmixed_over_public']:.2f}× "
                f"public"
                + (
                    f"; the PEFT loop is {r['loop_over_pmixed']:.1f}× slower"
                    if r.get("loop_over_pmixed")
                    else ""
                )
            )
    for r in results.get("in_context", []):
        for row in r.get("rows", []):
            print(
                f"in-context PMixED {r['model']} N={row['members']} cap={row['lambda_cap']}: "
                f"{row['tokens_per_s']:.1f} tokens/s = {row['over_public']:.2f}× public, "
                f"{row['peak_memory_gib'] or 0:.1f} GiB (public {r['public_peak_memory_gib'] or 0:.1f})"
            )
    for r in results.get("synth", []):
        for row in r.get("rows", []):
            print(
                f"synth {r['model']} {row['mechanism']}: {row['tokens_per_s']:.1f} tokens/s = "
                f"{row['over_public']:.2f}× non-private generation"
            )
    for r in results.get("submix", []):
        if "submix_over_public" in r:
            print(f"SubMix {r['model']} k={r['parts']}: {r['submix_over_public']:.2f}× public")
    for r in results.get("dpsgd", []):
        if "step_over_nonprivate" in r:
            mem = r.get("memory_over_nonprivate")
            print(
                f"DP-SGD {r['model']} {r['mode']}: {r['step_over_nonprivate']:.2f}× the "
                f"non-private step, {r['tokens_per_s']:.0f} tokens/s"
                + (f", memory {mem:.2f}×" if mem else "")
            )
    for r in results.get("exposure", []):
        if "seconds" in r:
            print(f"exposure {r['model']}: {r['candidates']:,} candidates in {r['seconds']:.1f}s")
    for r in results.get("pate", []):
        if "queries_per_s" in r:
            print(
                f"PromptPATE {r['model']}, {r['teachers']} teachers: "
                f"{r['queries_per_s']:.1f} public queries/s"
            )


if __name__ == "__main__":
    main()
