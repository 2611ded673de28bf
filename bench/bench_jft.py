"""Just Fine-tune Twice with SmolLM2-135M: perplexity and canary exposure of every model of
JFT §6, on WikiText-2 or on support dialogues full of PII.

``--corpus wikitext`` (→ bench/results/jft.json): the first RECORDS records of WikiText-2
train, with the random canary "My ID is <6 digits>" (seed 0) inserted 10 times as records of
its own; perplexity on WikiText-2 validation. Models:

- public; non-private LoRA; DP-SGD at ε = 3 (record level, δ = 1/n^1.1);
- redacted (phase 1 only, direct) for each spaCy level, with the % of tokens redacted;
- redacted and JFT with the canary caught by the detector, and deliberately missed (§6.4);
- redacted + light noise and JFT + light noise, canary missed. The miss rate is estimated
  on CoNLL-2003 testa (entities as the sensitive tokens) because WikiText-2 carries no
  annotations: a proxy, said so in the results.

``--corpus dialogue`` (→ bench/results/jft-dialogue.json): RECORDS customers' support chats
from privlm's PII corpus (``support_dialogues``, seed 0), one record per customer holding
all their turns, so record-level DP is customer-level. The same name, e-mail, phone, IDs and
address recur in a customer's turns. The canary turn "USR: My ID is <6 digits>" is put into
10 customers' dialogues. Perplexity on 100 other customers' dialogues (seed 1, unredacted).
For each detector, the PII tokens phase 1 would train on (gold spans no detected span
covers), in total and per type; models: public, non-private, DP-SGD at ε = 3, and JFT with
the ``pii`` detector, phase 1 (perplexity only) and phase 2. The
``pii`` detector runs with an allow-list for the speaker tags USR and SYS (``--patterns``),
as a user would write one.

Exposure is exact over all 10^6 candidates (privlm.audit.exposure). Adapters are cached
under ~/.cache/privlm/bench/, so a rerun only audits. Results are written after every model.

Usage: python bench/bench_jft.py [--corpus wikitext|dialogue] [--records 400]
       [--eval-blocks 8] [--no-exposure]
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from peft import PeftModel

from privlm.audit.exposure import DEFAULT_PREFIX, insert_canary, measure_exposure, random_canary
from privlm.data import Dataset, Record, corpora
from privlm.detect import Span, make_detector
from privlm.detect.annotated import AnnotatedText
from privlm.detect.miss_rate import annotated_from_conll
from privlm.detect.pii_corpus import join_turns, support_dialogues
from privlm.models import load_public_model
from privlm.models.perplexity import perplexity
from privlm.settings import cache_dir
from privlm.training.dpsgd import DpSgdConfig, train_dpsgd
from privlm.training.jft import JftConfig, train_jft
from privlm.training.lora_finetune import LoraTrainingConfig, finetune_lora
from privlm.training.redaction import redacted_token_fraction, sensitive_tokens_seen

RESULTS = Path(__file__).parent / "results"
MODEL, REPEATS = "smollm2-135m", 10
CANARY = random_canary(6, seed=0)
LEVELS = ("low-entity", "high-entity", "low-contextual", "high-contextual")
WIKITEXT_DETECTOR = "low-entity"  # catches "660487" in "My ID is 660487"
DIALOGUE_PREFIX = "USR: My ID is "
DIALOGUE_DETECTORS = ("regex", "low-entity", "presidio", "pii")
SPEAKER_TAGS = {"allow": [{"label": "SPEAKER", "terms": ["USR", "SYS"]}]}


@dataclass
class Bench:
    """One corpus's run: its data, where results and adapters go, the training settings,
    and the helpers that evaluate a model and train one unless it is cached."""

    corpus: str
    data: Dataset
    valid: list[str]
    prefix: str
    root: Path
    out_path: Path
    args: argparse.Namespace
    lora: LoraTrainingConfig
    dpsgd: DpSgdConfig
    meta: dict[str, Any]
    results: dict[str, dict[str, Any]]

    def save(self) -> None:
        RESULTS.mkdir(parents=True, exist_ok=True)
        body = {
            "model": MODEL, "corpus": self.corpus, "canary": self.prefix + CANARY,
            "repeats": REPEATS, "records": len(self.data), "eval_blocks": self.args.eval_blocks,
            **self.meta, "results": self.results,
        }  # fmt: skip
        self.out_path.write_text(json.dumps(body, indent=2))

    def evaluate(self, name: str, adapter: Path | None, audit: bool = True, **extra: Any) -> None:
        entry = self.results.get(name, {})
        lm = load_public_model(MODEL)  # fresh: an adapter modifies its base in place
        model = lm.model if adapter is None else PeftModel.from_pretrained(lm.model, adapter)
        model.eval()
        if "perplexity" not in entry:
            ppl = perplexity(model, lm.tokenizer, self.valid, max_blocks=self.args.eval_blocks)
            entry.update(perplexity=ppl.perplexity, eval_tokens=ppl.tokens_scored)
        if not self.args.no_exposure and audit and "exposure" not in entry:
            t = time.perf_counter()
            e = measure_exposure(model, lm.tokenizer, CANARY, prefix=self.prefix)
            entry.update(exposure=e.exposure, rank=e.rank, audit_seconds=time.perf_counter() - t)
        entry.update(extra)
        self.results[name] = entry
        print(
            f"{name:<32} ppl {entry['perplexity']:7.2f}  exposure "
            f"{entry.get('exposure', float('nan')):5.2f}",
            flush=True,
        )
        self.save()

    def trained(self, name: str, train: Callable[[Path], object]) -> tuple[Path, float]:
        path = self.root / name
        t = time.perf_counter()
        if not (path / "adapter_config.json").is_file():
            train(path)
        return path, time.perf_counter() - t

    def baselines(self) -> None:
        """The public model, a non-private LoRA fine-tune and DP-SGD at ε = 3."""
        self.evaluate("public", None)
        texts = self.data.texts()
        p, s = self.trained("nonprivate", lambda p: finetune_lora(MODEL, texts, self.lora, p))
        self.evaluate("non-private", p, train_seconds=s)
        p, s = self.trained("dpsgd", lambda p: train_dpsgd(MODEL, self.data, p, self.dpsgd))
        self.evaluate("dp-sgd", p, train_seconds=s, privacy=_json(p / "privacy.json"))

    def redacted(self, spec: str, audit: bool, **extra: Any) -> None:
        """Phase 1 alone (direct): a non-private fine-tune on the text ``spec`` redacts."""
        texts = self.data.texts()
        spans = make_detector(spec).detect(texts)
        frac = redacted_token_fraction(load_public_model(MODEL).tokenizer, texts, spans)
        p, s = self.trained(
            f"redacted-{spec}",
            lambda p: finetune_lora(MODEL, texts, self.lora, p, redact=spans),
        )
        self.evaluate(
            f"redacted ({spec})", p, audit=audit, train_seconds=s,
            redacted_token_fraction=frac, **extra,
        )  # fmt: skip

    def jft(
        self, name: str, cfg: JftConfig, label: str, audit_phase1: bool = True, **extra: Any
    ) -> None:
        """Both phases; the phase-1 adapter and the release are each evaluated."""
        final, p1 = self.root / name, self.root / f"{name}-phase1"
        t = time.perf_counter()
        if not (final / "sdp.json").is_file():
            train_jft(MODEL, self.data, final, cfg, phase1_dir=p1)
        sdp = _json(final / "sdp.json")
        seconds = time.perf_counter() - t
        p1_label = "redacted + light noise" if cfg.phase1 == "light-noise" else "redacted"
        frac = sdp["phase1"].get("redacted_token_fraction")
        self.evaluate(
            f"{p1_label} ({label})", p1, audit=audit_phase1, redacted_token_fraction=frac, **extra
        )
        jft_label = "JFT + light noise" if cfg.phase1 == "light-noise" else "JFT"
        self.evaluate(f"{jft_label} ({label})", final, train_seconds=seconds, sdp=sdp)


def _bench(corpus: str, data: Dataset, valid: list[str], prefix: str,
           args: argparse.Namespace, block_size: int, **meta: Any) -> Bench:  # fmt: skip
    name = "jft" if corpus == "wikitext" else f"jft-{corpus}"
    root = cache_dir() / "bench" / name
    root.mkdir(parents=True, exist_ok=True)
    out_path = RESULTS / f"{name}.json"
    results: dict[str, dict[str, Any]] = {}
    if out_path.is_file():
        old = json.loads(out_path.read_text())
        if old.get("eval_blocks") == args.eval_blocks:
            # the public model never saw the training data: its figures carry over
            same_data = old.get("records") == len(data)
            results = {k: v for k, v in old["results"].items() if same_data or k == "public"}
    lora = LoraTrainingConfig(
        epochs=2, block_size=block_size, batch_size=8, learning_rate=2e-3, pack=False
    )
    dpsgd = DpSgdConfig(
        target_epsilon=3.0, epochs=2, batch_size=64, physical_batch_size=8,
        block_size=block_size, learning_rate=2e-3,
    )  # fmt: skip
    return Bench(corpus, data, valid, prefix, root, out_path, args, lora, dpsgd, meta, results)


def run_wikitext(args: argparse.Namespace) -> None:
    data = corpora.wikitext2("train")
    data.records = data.records[: args.records]
    data = insert_canary(data, CANARY, REPEATS, seed=0)
    b = _bench("wikitext", data, corpora.wikitext2("valid").texts(), DEFAULT_PREFIX, args, 64)
    b.baselines()
    for level in LEVELS:
        b.redacted(level, audit=level == WIKITEXT_DETECTOR)
    conll = b.root / "conll-testa-annotated.jsonl"
    with conll.open("w") as f:
        for a in annotated_from_conll(corpora.conll2003("testa")[:1000]):
            spans = [[s.start, s.end] for s in a.sensitive]
            f.write(json.dumps({"text": a.text, "sensitive": spans}) + "\n")

    def cfg(mode: str, missed: bool) -> JftConfig:
        return JftConfig(
            detector=WIKITEXT_DETECTOR, phase1=mode,
            annotated_file=conll if mode == "light-noise" else None,
            deliberately_missed=[CANARY] if missed else [], phase1_training=b.lora,
            phase1_dpsgd=b.dpsgd, phase2=replace(b.dpsgd),
        )  # fmt: skip

    b.jft("jft-caught", cfg("direct", False), "caught")
    b.jft("jft-missed", cfg("direct", True), "missed")
    b.jft("jft-light-missed", cfg("light-noise", True), "missed")
    print(f"wrote {b.out_path}")


def dialogues_with_canary(customers: int, seed: int) -> list[AnnotatedText]:
    """One text per customer; the canary turn placed at random in REPEATS of them."""
    dialogues = support_dialogues(customers, seed=seed)
    rng = random.Random(seed)
    turn = DIALOGUE_PREFIX + CANARY
    canary = AnnotatedText(turn, (Span(len(DIALOGUE_PREFIX), len(turn), "ID"),))
    for d in rng.sample(dialogues, min(REPEATS, customers)):
        d.insert(rng.randrange(len(d) + 1), canary)
    return [join_turns(d) for d in dialogues]


def pii_tokens_seen(texts: list[AnnotatedText], spans: list[list[Span]]) -> dict[str, Any]:
    """How many of the gold PII tokens (model tokens) no detected span covers, per type."""
    tok = load_public_model(MODEL).tokenizer
    plain = [t.text for t in texts]
    total, seen = sensitive_tokens_seen(tok, plain, [t.sensitive for t in texts], spans)
    per_type = {}
    for kind in sorted({s.label for t in texts for s in t.sensitive}):
        gold = [[s for s in t.sensitive if s.label == kind] for t in texts]
        n, k = sensitive_tokens_seen(tok, plain, gold, spans)
        per_type[kind] = {"pii_tokens": n, "seen": k}
    return {"pii_tokens": total, "seen": seen, "seen_fraction": seen / max(1, total),
            "redacted_token_fraction": redacted_token_fraction(tok, plain, spans),
            "per_type": per_type}  # fmt: skip


def run_dialogue(args: argparse.Namespace) -> None:
    train = dialogues_with_canary(args.records, seed=0)
    data = Dataset([Record(t.text, f"customer-{i}") for i, t in enumerate(train)],
                   "support-dialogues", "record")  # fmt: skip
    valid = [join_turns(d).text for d in support_dialogues(100, seed=1)]
    b = _bench("dialogue", data, valid, DIALOGUE_PREFIX, args, 160)
    rules = b.root / "speaker-tags.json"
    rules.write_text(json.dumps(SPEAKER_TAGS))
    seen = {}
    for spec in DIALOGUE_DETECTORS:
        t = time.perf_counter()
        det = make_detector(spec, patterns=rules if spec == "pii" else None)
        spans = det.detect([x.text for x in train])
        seen[spec] = {**pii_tokens_seen(train, spans), "seconds": time.perf_counter() - t}
        print(f"{spec:<12} phase 1 would see {seen[spec]['seen']} of "
              f"{seen[spec]['pii_tokens']} PII tokens", flush=True)  # fmt: skip
    b.meta["pii_tokens_seen"] = seen
    b.save()
    b.baselines()
    cfg = JftConfig(detector="pii", patterns_file=rules, phase1_training=b.lora,
                    phase2=replace(b.dpsgd))  # fmt: skip
    # phase 1's canary audit is left out to keep the run near an hour on 2 CPU cores: the
    # pii detector catches the canary's ID (a cued number), so phase 1 never sees it
    b.jft("jft-pii", cfg, "pii", audit_phase1=False, pii_tokens_seen=seen["pii"]["seen"])
    print(f"wrote {b.out_path}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", choices=("wikitext", "dialogue"), default="wikitext")
    ap.add_argument("--records", type=int, default=400, help="records (wikitext), customers")
    ap.add_argument("--eval-blocks", type=int, default=8)
    ap.add_argument("--no-exposure", action="store_true")
    args = ap.parse_args()
    (run_wikitext if args.corpus == "wikitext" else run_dialogue)(args)


def _json(p: Path) -> dict[str, Any]:
    return json.loads(p.read_text())  # type: ignore[no-any-return]


if __name__ == "__main__":
    main()
