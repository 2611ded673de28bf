"""Just Fine-tune Twice on WikiText-2 with SmolLM2-135M: perplexity and canary exposure of
every model of JFT §6 (issue 4 §3–4).

Training data: the first RECORDS records of WikiText-2 train, with the random canary
"My ID is <6 digits>" (seed 0) inserted 10 times. Evaluation: WikiText-2 validation
(EVAL_BLOCKS blocks of 512 tokens). Models:

- public; non-private LoRA; DP-SGD at ε = 3 (record level, δ = 1/n^1.1);
- redacted (phase 1 only, direct) for each spaCy level, with the % of tokens redacted;
- redacted and JFT with the canary caught by the detector, and deliberately missed (§6.4);
- redacted + light noise and JFT + light noise, canary missed. The miss rate is estimated
  on CoNLL-2003 testa (entities as the sensitive tokens) because WikiText-2 carries no
  annotations: a proxy, said so in the results.

Exposure is exact over all 10^6 candidates (privlm.audit.exposure). Adapters are cached
under ~/.cache/privlm/bench/jft, so a rerun only audits. Results are written after every
model to bench/results/jft.json.

Usage: python bench/bench_jft.py [--records 400] [--eval-blocks 8] [--no-exposure]
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

from peft import PeftModel

from privlm.audit.exposure import insert_canary, measure_exposure, random_canary
from privlm.data import corpora
from privlm.detect import make_detector
from privlm.detect.miss_rate import annotated_from_conll
from privlm.models import load_public_model, perplexity
from privlm.settings import cache_dir
from privlm.training.dpsgd import DpSgdConfig, train_dpsgd
from privlm.training.jft import JftConfig, train_jft
from privlm.training.lora_finetune import LoraTrainingConfig, finetune_lora
from privlm.training.redaction import redacted_token_fraction

RESULTS = Path(__file__).parent / "results"
MODEL, REPEATS = "smollm2-135m", 10
CANARY = random_canary(6, seed=0)
LEVELS = ("low-entity", "high-entity", "low-contextual", "high-contextual")
JFT_DETECTOR = "low-entity"  # catches "660487" in "My ID is 660487"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=400)
    ap.add_argument("--eval-blocks", type=int, default=8)
    ap.add_argument("--no-exposure", action="store_true")
    args = ap.parse_args()
    data = corpora.wikitext2("train")
    data.records = data.records[: args.records]
    data = insert_canary(data, CANARY, REPEATS, seed=0)
    valid = corpora.wikitext2("valid").texts()
    root = cache_dir() / "bench" / "jft"
    root.mkdir(parents=True, exist_ok=True)
    lm = load_public_model(MODEL)
    out_path = RESULTS / "jft.json"
    results: dict[str, dict] = {}
    if out_path.is_file():
        old = json.loads(out_path.read_text())
        if old.get("records") == len(data) and old.get("eval_blocks") == args.eval_blocks:
            results = old["results"]

    lora = LoraTrainingConfig(epochs=2, block_size=64, batch_size=8, learning_rate=2e-3, pack=False)
    dpsgd = DpSgdConfig(
        target_epsilon=3.0, epochs=2, batch_size=64, physical_batch_size=8, block_size=64,
        learning_rate=2e-3,
    )  # fmt: skip

    def save() -> None:
        RESULTS.mkdir(parents=True, exist_ok=True)
        out_path.write_text(
            json.dumps(
                {
                    "model": MODEL,
                    "canary": f"My ID is {CANARY}",
                    "repeats": REPEATS,
                    "records": len(data),
                    "eval_blocks": args.eval_blocks,
                    "results": results,
                },
                indent=2,
            )
        )

    def evaluate(name: str, adapter: Path | None, **extra) -> None:
        entry = results.get(name, {})
        base = load_public_model(MODEL).model  # fresh: an adapter modifies its base in place
        model = base if adapter is None else PeftModel.from_pretrained(base, adapter)
        model.eval()
        if "perplexity" not in entry:
            ppl = perplexity(model, lm.tokenizer, valid, max_blocks=args.eval_blocks)
            entry.update(perplexity=ppl.perplexity, eval_tokens=ppl.tokens_scored)
        if not args.no_exposure and extra.pop("audit", True) and "exposure" not in entry:
            t = time.perf_counter()
            e = measure_exposure(model, lm.tokenizer, CANARY)
            entry.update(exposure=e.exposure, rank=e.rank, audit_seconds=time.perf_counter() - t)
        extra.pop("audit", None)
        entry.update(extra)
        results[name] = entry
        print(
            f"{name:<28} ppl {entry['perplexity']:7.2f}  exposure "
            f"{entry.get('exposure', float('nan')):5.2f}",
            flush=True,
        )
        save()

    def trained(path: Path, train) -> tuple[Path, float]:
        t = time.perf_counter()
        if not (path / "adapter_config.json").is_file():
            train()
        return path, time.perf_counter() - t

    evaluate("public", None)
    p, s = trained(
        root / "nonprivate", lambda: finetune_lora(MODEL, data.texts(), lora, root / "nonprivate")
    )
    evaluate("non-private", p, train_seconds=s)
    p, s = trained(root / "dpsgd", lambda: train_dpsgd(MODEL, data, root / "dpsgd", dpsgd))
    evaluate("dp-sgd", p, train_seconds=s, privacy=_json(p / "privacy.json"))

    texts = data.texts()
    for level in LEVELS:
        det = make_detector(level)
        spans = det.detect(texts)
        frac = redacted_token_fraction(lm.tokenizer, texts, spans)
        path = root / f"redacted-{level}"
        p, s = trained(
            path,
            lambda path=path, spans=spans: finetune_lora(MODEL, texts, lora, path, redact=spans),
        )
        evaluate(
            f"redacted ({level})", p, train_seconds=s, redacted_token_fraction=frac,
            audit=level == JFT_DETECTOR,
        )  # fmt: skip

    conll = root / "conll-testa-annotated.jsonl"
    with conll.open("w") as f:
        for a in annotated_from_conll(corpora.conll2003("testa")[:1000]):
            spans = [[s.start, s.end] for s in a.sensitive]
            f.write(json.dumps({"text": a.text, "sensitive": spans}) + "\n")

    def jft(name: str, phase1_name: str, mode: str, missed: bool) -> None:
        cfg = JftConfig(
            detector=JFT_DETECTOR,
            phase1=mode,
            annotated_file=conll if mode == "light-noise" else None,
            deliberately_missed=[CANARY] if missed else [],
            phase1_training=lora,
            phase1_dpsgd=dpsgd,
            phase2=replace(dpsgd),
        )
        final, p1 = root / name, root / phase1_name
        t = time.perf_counter()
        if not (final / "sdp.json").is_file():
            train_jft(MODEL, data, final, cfg, phase1_dir=p1)
        sdp = _json(final / "sdp.json")
        seconds = time.perf_counter() - t
        label = "missed" if missed else "caught"
        p1_label = "redacted + light noise" if mode == "light-noise" else "redacted"
        evaluate(
            f"{p1_label} ({label})",
            p1,
            redacted_token_fraction=sdp["phase1"].get("redacted_token_fraction"),
        )
        jft_label = "JFT + light noise" if mode == "light-noise" else "JFT"
        evaluate(f"{jft_label} ({label})", final, train_seconds=seconds, sdp=sdp)

    jft("jft-caught", "jft-caught-phase1", "direct", missed=False)
    jft("jft-missed", "jft-missed-phase1", "direct", missed=True)
    jft("jft-light-missed", "jft-light-missed-phase1", "light-noise", missed=True)
    print(f"wrote {out_path}")


def _json(p: Path) -> dict:
    return json.loads(p.read_text())


if __name__ == "__main__":
    main()
