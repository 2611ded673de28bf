"""Just Fine-tune Twice (JFT): selective DP for language models (Shi et al., §3).

Phase 1, the redacted fine-tune, in one of three modes (§3.1):

- ``direct``: redact the private data with a secret detector (each span one ``<mask>``
  slot, left out of the loss) and fine-tune without noise;
- ``screened``: fine-tune without noise on a sanitised file the user supplies, where
  ``<mask>`` marks what was removed by hand;
- ``light-noise``: redact, then DP-SGD whose noise is calibrated at sampling rate q·m̃_hi,
  m̃_hi the upper end of the 95 % t-interval of the detector's miss rate, estimated from a
  small annotated sample (``privlm.detect.miss_rate``). ε is reported at both ends.

Phase 2, the private fine-tune (§3.2): DP-SGD on the original data, starting from the
phase-1 adapter.

Guarantee (Theorem 1): if the phase-1 data contain no sensitive token and phase 2 is
(ε, δ)-DP, the model is (ε, δ)-SDP under the policy. DP implies SDP; phase 1 is then
(0, 0)-SDP but not DP. Light noise replaces "no sensitive token" by an *estimate*: the
paper notes that amplification by m̃ assumes missed tokens spread evenly over batches, so
its ε is empirical, and is labelled so here. The statement also gives the ordinary DP ε
where there is one (light noise: phase 1 accounted at its true rate q, composed with
phase 2); direct and screened phase 1 have none.
"""

from __future__ import annotations

import json
import math
import secrets
import shutil
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from privlm.accounting import Charge, DpSgdPlan, PrivacyLedger
from privlm.accounting.budgeted import BudgetedRun
from privlm.accounting.statements import guarantee_of, guarantee_text
from privlm.curator import PUBLIC, Schema, curator_report_path, release_statement
from privlm.data import Dataset, load_file
from privlm.detect import (
    AllowingDetector,
    Detector,
    MissRateInterval,
    load_annotated,
    make_detector,
    miss_rate_interval,
)
from privlm.detect.provenance import detector_record
from privlm.errors import PrivlmError
from privlm.models import LoadedModel, ModelSource, reference_of
from privlm.training.config import PHASE1_MODES as PHASE1_MODES
from privlm.training.config import JftConfig as JftConfig
from privlm.training.dpsgd import RELEASES as DPSGD_RELEASES
from privlm.training.dpsgd import (
    RUN_RELEASES,
    DpSgdRun,
    PrivacyStatement,
    examples_per_unit,
    fit_dpsgd,
    plan_run,
    release_adapter,
)
from privlm.training.lora_finetune import finetune_lora
from privlm.training.model_card import jft_phase1_card
from privlm.training.redaction import redacted_token_fraction, spans_of_literal_masks
from privlm.training.sdp_charges import PHASE1_CHARGE, PHASE2_CHARGE

# what sdp.json releases (privlm.curator.split_statement): phase 1's non-private training
# statistics (blocks, tokens, steps, losses, times) and the redacted share stay with the curator
RELEASES: Schema = {
    **dict.fromkeys(
        ("guarantee", "epsilon", "delta", "policy", "phase1_mode", "assumption",
         "epsilon_range", "dp_epsilon", "theorem"), PUBLIC,
    ),
    "phase1": {
        **dict.fromkeys(
            ("mode", "adapter", "miss_rate", "noise_multiplier", "sample_rate", "steps",
             "epsilon_low", "epsilon_high", "estimate", "measured_miss_rate"), PUBLIC,
        ),
        "statement": DPSGD_RELEASES,
        "training": {"targets": PUBLIC},
    },
    "phase2": RUN_RELEASES,
}  # fmt: skip


@dataclass(frozen=True)
class SdpStatement:
    """What a JFT model guarantees, and under which assumption."""

    guarantee: str
    epsilon: float  # SDP ε (light noise: at the upper end m̃_hi, an estimate)
    delta: float
    policy: str
    phase1_mode: str
    assumption: str
    epsilon_range: tuple[float, float] | None  # light noise: SDP ε at m̃_lo and m̃_hi
    dp_epsilon: float | None  # ordinary DP ε of the whole model, where there is one
    phase1: dict[str, Any]
    phase2: dict[str, Any]
    theorem: str = "JFT Theorem 1 (Shi et al.)"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def light_noise_epsilons(
    run: DpSgdRun, miss: MissRateInterval, accountant: str
) -> tuple[float, float]:
    """Phase-1 ε at sampling rates q·m̃_lo and q·m̃_hi (0 when the rate is 0): the run's
    own cost function at those rates."""

    def eps(m: float) -> float:
        return 0.0 if m <= 0 else replace(run, rate_factor=m).epsilon(accountant)

    return eps(miss.low), eps(miss.high)


def composed_epsilon(parts: list[tuple[float, float, int]], delta: float) -> float:
    """ε at δ of DP-SGD runs (σ, q, steps) composed under RDP; a rate of 0 costs nothing."""
    curve = None
    for sigma, q, steps in parts:
        if q <= 0:
            continue
        c = DpSgdPlan(sigma, q, steps).rdp_curve()
        curve = c if curve is None else curve + c
    return 0.0 if curve is None else curve.to_dp(delta).epsilon


def _detector(cfg: JftConfig, detector: Detector | None) -> Detector:
    d = detector or make_detector(cfg.detector, patterns=cfg.patterns_file)
    return AllowingDetector(d, cfg.deliberately_missed) if cfg.deliberately_missed else d


def train_jft(
    model: ModelSource,
    dataset: Dataset,
    out_dir: str | Path,
    cfg: JftConfig | None = None,
    *,
    phase1_dir: str | Path | None = None,
    ledger: PrivacyLedger | None = None,
    detector: Detector | None = None,
    progress: bool = True,
) -> SdpStatement:
    """Run both phases on ``model`` (a name, or a loaded model, which each phase copies and
    leaves unchanged); the phase-2 adapter in ``out_dir`` is the release, with
    ``privacy.json`` (phase 2's DP statement) and ``sdp.json`` (this function's result).

    With a ledger, what the run will charge (phase 2, and for light noise the phase-1
    estimate at m̃_hi) is checked before any training, and charged before each adapter is
    written.

    The phase-1 adapter (trained without noise on the redacted data) is kept in
    ``phase1_dir`` only when one is given; otherwise it lives in a hidden folder beside
    ``out_dir`` and is deleted once phase 2 is done, or fails."""
    out = Path(out_dir)
    if phase1_dir is not None:
        return _train_jft(
            model, dataset, out, cfg, (Path(phase1_dir), True), ledger, detector, progress
        )
    scratch = out.with_name(f".{out.name}-phase1-{secrets.token_hex(4)}")
    try:
        return _train_jft(model, dataset, out, cfg, (scratch, False), ledger, detector, progress)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        curator_report_path(scratch).unlink(missing_ok=True)


def _train_jft(
    model: ModelSource,
    dataset: Dataset,
    out: Path,
    cfg: JftConfig | None,
    phase1_place: tuple[Path, bool],
    ledger: PrivacyLedger | None,
    detector: Detector | None,
    progress: bool,
) -> SdpStatement:
    """``phase1_place``: where phase 1 is written, and whether it is kept (asked for) or a
    scratch folder deleted after phase 2; a released file says which, never the path."""
    cfg = cfg or JftConfig()
    p1_dir, kept = phase1_place
    det = _detector(cfg, detector)
    texts, _ = examples_per_unit(dataset)
    n = len(texts)
    reference, unit = reference_of(model), dataset.unit_kind
    run2 = plan_run(dataset, cfg.phase2)
    delta = run2.delta
    p2_dp = replace(cfg.phase2, delta=delta)
    charges = [run2.charge(PHASE2_CHARGE, p2_dp.accountant, unit, {"model": reference})]
    phase1: dict[str, Any] = {
        "mode": cfg.phase1,
        "adapter": "kept by the curator, not released" if kept else "deleted after phase 2",
    }
    miss: MissRateInterval | None = None
    run1: DpSgdRun | None = None
    p1_dp = replace(cfg.phase1_dp(), delta=delta)  # light noise: phase 1's DP-SGD
    if cfg.phase1 == "light-noise":
        assert cfg.annotated_file is not None
        miss = miss_rate_interval(
            det, load_annotated(cfg.annotated_file), groups=cfg.miss_rate_groups
        )
        if miss.high <= 0:
            raise PrivlmError(
                "the detector missed no sensitive token in the annotated sample, so light "
                "noise has nothing to calibrate against; use --phase1 direct, or annotate a "
                "larger sample"
            )
        run1 = plan_run(dataset, p1_dp, rate_factor=miss.high)
        charges.insert(0, run1.charge(PHASE1_CHARGE, p1_dp.accountant, unit, {"model": reference}))
        eps_lo, eps_hi = light_noise_epsilons(run1, miss, p1_dp.accountant)
        phase1.update(
            miss_rate=miss.to_dict(),
            noise_multiplier=run1.noise_multiplier,
            sample_rate=run1.sample_rate,
            steps=run1.steps,
            epsilon_low=eps_lo,
            epsilon_high=eps_hi,
            estimate=True,
        )
    elif cfg.annotated_file is not None:  # direct or screened: measured, stated, not used
        measured = miss_rate_interval(
            det, load_annotated(cfg.annotated_file), groups=cfg.miss_rate_groups
        )
        phase1["measured_miss_rate"] = measured.to_dict()
    # every charge of the run (phase 2; phase 1 too in light noise) checked together
    budget = BudgetedRun.start(ledger, "this JFT run", *charges)
    # phase 1
    if cfg.phase1 == "direct":
        spans = det.detect(texts)
        phase1["redacted_token_fraction"] = _fraction(model, texts, spans)
        phase1["training"] = finetune_lora(
            model, texts, cfg.phase1_lora(), p1_dir, "jft phase 1", progress, redact=spans
        )
    elif cfg.phase1 == "screened":
        assert cfg.screened_file is not None
        screened = load_file(cfg.screened_file).texts()
        spans = [spans_of_literal_masks(t) for t in screened]
        phase1["screened_records"] = len(screened)
        phase1["training"] = finetune_lora(
            model, screened, cfg.phase1_lora(), p1_dir, "jft phase 1", progress, redact=spans
        )
    else:
        assert miss is not None and run1 is not None
        fitted1 = fit_dpsgd(model, dataset, p1_dp, run1, detector=det, progress=progress)
        st1 = release_adapter(
            fitted1, p1_dir, budget, charges[0], {"miss_rate": miss.to_dict(), "estimate": True}
        )
        phase1["statement"] = st1.to_dict()
        phase1["redacted_token_fraction"] = json.loads(curator_report_path(p1_dir).read_text())[
            "statistics"
        ]["redacted_token_fraction"]  # phase 1's exact statistic, from its curator report
    if cfg.phase1 != "light-noise":
        card = jft_phase1_card(reference_of(model), policy_name(cfg, det), n)
        (p1_dir / "README.md").write_text(card)
    # phase 2: its privacy.json states the model's guarantee, SDP, never plain DP
    dp_eps = None
    if miss is not None:
        s1, q1, n1 = phase1["noise_multiplier"], phase1["sample_rate"], phase1["steps"]
        dp_eps = composed_epsilon(
            [(s1, q1, n1), (run2.noise_multiplier, run2.sample_rate, run2.steps)], delta
        )
    fitted2 = fit_dpsgd(
        model, dataset, p2_dp, run2, init_adapter=p1_dir,
        init_from=f"JFT phase 1: {phase1['adapter']}", progress=progress,
    )  # fmt: skip
    st2 = release_adapter(fitted2, out, budget, charges[-1], sdp_release_label(cfg, det, dp_eps))
    statement = _statement(cfg, det, phase1, st2, miss, charges)
    released = release_statement(statement.to_dict(), RELEASES, out)  # statistics beside
    (out / "sdp.json").write_text(json.dumps(released, indent=2))
    return statement


def policy_name(cfg: JftConfig, det: Detector) -> str:
    """The policy function F of the SDP statement: the detector's name, or manual screening."""
    return "manual screening" if cfg.phase1 == "screened" else det.name


def sdp_release_label(cfg: JftConfig, det: Detector, dp_epsilon: float | None) -> dict[str, Any]:
    """What a JFT model's privacy.json, model card and service say it is:
    (ε, δ)-SDP under the named policy, with its honest DP figure: none for the direct and
    screened modes (phase 1 saw everything the policy let through, with no noise), the
    composed light-noise bound otherwise. The ε in the statement is phase 2's."""
    policy = policy_name(cfg, det)
    dp = dp_epsilon if dp_epsilon is not None and math.isfinite(dp_epsilon) else None
    return {
        "guarantee_kind": "SDP",
        "mechanism": (
            "Just Fine-tune Twice: phase 1 on redacted data, then DP-SGD on the original data "
            "from the phase-1 adapter (selective DP, JFT Theorem 1)"
        ),
        "policy": policy,
        "detector": None if cfg.phase1 == "screened" else detector_record(det),
        "phase1_mode": cfg.phase1,
        "dp_epsilon": dp,
        "not_dp": (
            "the ε above is selective DP: it protects what the policy flags as secret. "
            + (
                "Phase 1 trained without noise on everything the policy let through, so the "
                "model has no ordinary DP guarantee."
                if dp is None
                else f"As ordinary DP the whole model is ({dp:.4g}, δ)-DP (light noise)."
            )
        ),
    }


def _fraction(model: ModelSource, texts: list[str], spans: list[Any]) -> float:
    from privlm.models import load_tokenizer

    tokenizer = model.tokenizer if isinstance(model, LoadedModel) else load_tokenizer(model)
    return redacted_token_fraction(tokenizer, texts, spans)


def _perfect_detector_assumption(phase1: dict[str, Any]) -> str:
    """What the SDP statement of direct and screened mode assumes, with the detector's miss
    rate when an annotated sample measured it."""
    base = (
        "the phase-1 data contain no sensitive token under the policy (a detector with 100% "
        "recall on this data, or a complete manual screening); phase 1 is then (0, 0)-SDP but "
        "not DP"
    )
    measured = phase1.get("measured_miss_rate")
    if measured is None:
        return (
            f"{base}. No annotated sample was given, so this assumes a perfect detector without "
            "measuring it (--annotated FILE measures its miss rate on your kind of text)"
        )
    missed, sensitive = measured["missed_tokens"], measured["sensitive_tokens"]
    return (
        f"{base}. Measured on the annotated sample, the detector missed {missed} of "
        f"{sensitive} sensitive tokens ({measured['sensitive_miss_rate']:.1%}; m = "
        f"{measured['mean']:.3g} per token, 95% interval [{measured['low']:.3g}, "
        f"{measured['high']:.3g}]): "
        + (
            "the assumption held on that sample"
            if missed == 0
            else "the assumption does not hold, and phase 1 trains on missed secrets without "
            "noise; use --phase1 light-noise to account for them"
        )
    )


def _statement(
    cfg: JftConfig,
    det: Detector,
    phase1: dict[str, Any],
    st2: PrivacyStatement,
    miss: MissRateInterval | None,
    charges: list[Charge],
) -> SdpStatement:
    """The run's SDP statement: its ε is that of the charges the ledger records (phase 2;
    in light noise phase 1 at the upper end of the miss rate too); the lower end and the
    plain-DP figure beside it are estimates no charge pays for, and say so."""
    policy = policy_name(cfg, det)
    p2 = (st2.noise_multiplier, st2.sample_rate, st2.steps)
    if miss is None:
        eps = st2.epsilon
        return SdpStatement(
            guarantee=f"{guarantee_text(eps, st2.delta, kind='SDP')} under the policy '{policy}'",
            epsilon=eps,
            delta=st2.delta,
            policy=policy,
            phase1_mode=cfg.phase1,
            assumption=_perfect_detector_assumption(phase1),
            epsilon_range=None,
            dp_epsilon=None,
            phase1=phase1,
            phase2=st2.to_dict(),
        )
    s1, q1, n1 = phase1["noise_multiplier"], phase1["sample_rate"], phase1["steps"]
    lo = composed_epsilon([(s1, q1 * miss.low, n1), p2], st2.delta)
    hi = guarantee_of(charges, st2.delta).epsilon  # what the ledger records
    lo = min(lo, hi)  # an estimate on another grid: never above the charged figure
    dp = composed_epsilon([(s1, q1, n1), p2], st2.delta)
    return SdpStatement(
        guarantee=(
            f"{guarantee_text(hi, st2.delta, kind='SDP')} under the policy '{policy}', "
            f"estimated (ε between {lo:.4g} and {hi:.4g} over the 95% interval of the miss "
            f"rate); {guarantee_text(dp, st2.delta)}"
        ),
        epsilon=hi,
        delta=st2.delta,
        policy=policy,
        phase1_mode=cfg.phase1,
        assumption=(
            "missed secrets are sampled at rate q·m, m within the 95% t-interval "
            f"[{miss.low:.4g}, {miss.high:.4g}] estimated from {miss.groups} groups of the "
            "annotated sample; amplification by m assumes missed tokens spread evenly over "
            "batches, so this ε is an empirical estimate (JFT §3.1)"
        ),
        epsilon_range=(lo, hi),
        dp_epsilon=dp if math.isfinite(dp) else None,
        phase1=phase1,
        phase2=st2.to_dict(),
    )
