"""The random-code text-extraction attack of SubMix §4.2.

m users, each with one record "My number is: <ℓ random digits>". A non-private fine-tuned
model, a PMixED ensemble and a SubMix ensemble are trained on them; the attacker prompts
"My number is:" g times and counts the generations whose code exactly matches a secret one.
The hit rate is that count over g. One user per model (PMixED: N = m parts; SubMix: k = m/2
parts, one user per half) makes every ensemble member memorise its code, the worst case.
"""

from __future__ import annotations

import re
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from privlm.audit.config import EXTRACTION_DELTA, ExtractionConfig
from privlm.data import Dataset, Record
from privlm.predict.config import PMixEDConfig, SubMixConfig
from privlm.predict.engine import CachedDecoder, EnsembleEngine
from privlm.predict.factory import build_predictor
from privlm.predict.loading import load_ensemble
from privlm.predict.sampling import sample
from privlm.progress import progress_bar
from privlm.randomness import PrivacyRandomness
from privlm.training.config import EnsembleConfig, LoraTrainingConfig
from privlm.training.ensemble import train_ensemble

PREFIX = "My number is:"


def make_codes(m: int, length: int, seed: int | None) -> list[str]:
    """m distinct random ℓ-digit codes (leading zeros allowed)."""
    rng = secrets.SystemRandom() if seed is None else __import__("random").Random(seed)
    codes: set[str] = set()
    while len(codes) < m:
        codes.add("".join(rng.choice("0123456789") for _ in range(length)))
    return sorted(codes)


def code_corpus(codes: list[str]) -> Dataset:
    recs = [Record(f"{PREFIX} {c}", f"user-{i}", line=i + 1) for i, c in enumerate(codes)]
    return Dataset(recs, "extraction-codes", "user")


def extract_code(text: str, length: int) -> str | None:
    """The first run of digits in a generation, if it has exactly ℓ digits."""
    m = re.search(r"\d+", text)
    return m.group(0) if m and len(m.group(0)) == length else None


@dataclass
class AttackResult:
    method: str
    hits: int
    generations: int
    epsilon_spent: float | None
    relation: str = "none: not private"

    @property
    def hit_rate(self) -> float:
        return self.hits / self.generations


def _sample_plain(
    engine: EnsembleEngine, tokenizer: Any, row: int, n_tokens: int, gen: PrivacyRandomness
) -> str:
    ids = tokenizer(PREFIX, add_special_tokens=False)["input_ids"]
    dec = CachedDecoder(engine, ids, [row])
    out = []
    for _ in range(n_tokens):
        tok = sample(dec.last[0], gen)
        if tok == tokenizer.eos_token_id:
            break
        out.append(tok)
        dec.advance(tok)
    text: str = tokenizer.decode(out)
    return text


def run_extraction(
    model: str,
    config: ExtractionConfig | None = None,
    training: LoraTrainingConfig | None = None,
    workdir: str | Path | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Train the three models on fresh random codes and attack each; returns the results.
    ``training`` overrides how the models are fine-tuned (default: ``config.training()``)."""
    c = config or ExtractionConfig()
    n_codes, length, generations, seed = c.codes, c.length, c.generations, c.seed
    epsilon_pmixed, epsilon_submix, sample_rate = c.epsilon_pmixed, c.epsilon_submix, c.sample_rate
    cfg = training or c.training()
    codes = make_codes(n_codes, length, seed)
    secret = set(codes)
    data = code_corpus(codes)
    root = Path(workdir or tempfile.mkdtemp(prefix="privlm-extraction-"))
    tokens = length + 3  # room for a space and the digits
    queries = generations * tokens
    gen = PrivacyRandomness(seed)
    results: list[AttackResult] = []

    train_ensemble(
        model, data, root / "finetuned", EnsembleConfig(parts=1, training=cfg), progress=progress
    )
    lm, eng, _ = load_ensemble(root / "finetuned", cfg.device, cfg.dtype)
    hits = sum(
        extract_code(_sample_plain(eng, lm.tokenizer, 0, tokens, gen), length) in secret
        for _ in progress_bar(range(generations), desc="attack finetuned", disable=not progress)
    )
    results.append(AttackResult("finetuned", hits, generations, None))

    train_ensemble(
        model, data, root / "pmixed", EnsembleConfig(parts=n_codes, training=cfg), progress=progress
    )
    pcfg = PMixEDConfig(
        epsilon=epsilon_pmixed,
        delta=EXTRACTION_DELTA,
        alpha=3,
        queries=queries,
        sample_rate=sample_rate,
    )
    loaded = load_ensemble(root / "pmixed", cfg.device, cfg.dtype)
    pm = build_predictor(pcfg, loaded, ledger=root / "ledger.db", name="pmixed", seed=seed)
    hits = 0
    for _ in progress_bar(range(generations), desc="attack pmixed", disable=not progress):
        hits += extract_code(pm.generate(PREFIX, tokens).text, length) in secret
    results.append(
        AttackResult(
            "pmixed",
            hits,
            generations,
            pm.budget()["spent"]["epsilon"],
            "(ε, δ)-DP per unit: one member replaced",
        )
    )

    train_ensemble(
        model,
        data,
        root / "submix",
        EnsembleConfig(parts=n_codes // 2, protocol="submix", training=cfg),
        progress=progress,
    )
    scfg = SubMixConfig(epsilon=epsilon_submix, alpha=2.0, beta=epsilon_submix / queries)
    loaded = load_ensemble(root / "submix", cfg.device, cfg.dtype)
    sm = build_predictor(scfg, loaded, ledger=root / "ledger.db", name="submix", seed=seed)
    hits = 0
    for _ in progress_bar(range(generations), desc="attack submix", disable=not progress):
        hits += extract_code(sm.generate(PREFIX, tokens).text, length) in secret
    results.append(
        AttackResult(
            "submix",
            hits,
            generations,
            sm.budget()["spent"]["rdp_epsilon"],
            "Rényi operational privacy per part (a part removed), not per unit",
        )
    )

    return {
        "model": model,
        **lm.placement.describe(),
        "codes": n_codes,
        "length": length,
        "generations": generations,
        "chance_hit_rate": n_codes / 10**length,
        "workdir": str(root),
        "results": [{**r.__dict__, "hit_rate": r.hit_rate} for r in results],
    }
