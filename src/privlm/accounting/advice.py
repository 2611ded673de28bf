"""Plain-language checks of a guarantee's parameters.

δ is the probability with which an (ε, δ) guarantee may fail outright: a mechanism that
publishes each unit's data with probability δ is (0, δ)-DP. So δ must be far below 1/n for
n units, or a whole unit can be expected to leak. 1/n^1.1 meets that only barely for small n
(20 units give δ = 0.037), so privlm's default everywhere is :func:`suggested_delta`,
min(1/n^1.1, 1e-6), which never draws the warning; a user-chosen δ may not meet it at all.
:func:`weak_delta_warning` says so, and what to use instead.

>>> weak_delta_warning(1e-6, 20) is None
True
>>> print(weak_delta_warning(0.05, 20))  # doctest: +ELLIPSIS
δ = 0.05 is weak for 20 records: ... use --delta 1e-06 (min(1/n^1.1, 1e-6)).
"""

from __future__ import annotations

from privlm.errors import AccountingError

# above this, δ is weak whatever n is: one chance in 10,000 that the guarantee fails
WEAK_DELTA = 1e-4
STRONG_DELTA_FLOOR = 1e-6
# the share of evenly split queries that noise may pass before the threshold is flagged
NOISE_PASS_LIMIT = 0.25


def suggested_delta(units: int) -> float:
    """min(1/n^1.1, 1e-6): well below 1/n for every n, privlm's one default δ (DP-SGD,
    JFT, PromptDPSGD, PromptPATE, the service's datasets). The Flocks paper uses δ of order
    1/N^1.1 or less; for the small n of prompts (20 examples give 0.037 at 1/n^1.1) the
    floor 1e-6 decides.

    >>> suggested_delta(20), suggested_delta(10_000_000) < 1e-6
    (1e-06, True)
    """
    if units < 1:
        raise AccountingError(f"δ needs at least one privacy unit, got {units}")
    return float(min(float(units) ** -1.1, STRONG_DELTA_FLOOR))


def weak_delta_warning(delta: float, units: int, unit: str = "record") -> str | None:
    """A warning when δ ≥ 1/n (a whole unit may leak) or δ > 1e-4; None when δ is strong."""
    n = max(int(units), 1)
    if delta < 1.0 / n and delta <= WEAK_DELTA:
        return None
    why = (
        f"it is at least 1/n = {1.0 / n:.3g}, so the guarantee allows one whole {unit} to leak"
        if delta >= 1.0 / n
        else f"the guarantee may fail outright with probability {delta:.3g}, above {WEAK_DELTA:g}"
    )
    return (
        f"δ = {delta:.3g} is weak for {n} {unit}s: {why}; "
        f"use --delta {suggested_delta(n):.3g} (min(1/n^1.1, 1e-6))."
    )


def threshold_warning(
    threshold: float, sigma_threshold: float, teachers: int, classes: int
) -> str | None:
    """Confident-GNMax's threshold check against the teacher count.

    A query passes when max vote + N(0, σ₁²) ≥ T. With ``teachers`` voters the max vote is at
    most ``teachers``; when the teachers split evenly it is about teachers/classes. If noise
    alone passes such a query often, the labels it releases carry no consensus and still cost
    ε. Returns a warning when T ≥ teachers (only noise can pass any query), or when T is
    meant to reject an even split (T > teachers/classes) and noise passes one with
    probability above :data:`NOISE_PASS_LIMIT`; None otherwise.

    >>> threshold_warning(60, 30, 100, 6) is None
    True
    >>> print(threshold_warning(60, 30, 30, 2))  # doctest: +ELLIPSIS
    the threshold T = 60 is not below the 30 teachers: no query passes on the votes ...
    """
    from scipy.stats import norm

    split_evenly = teachers / max(classes, 1)
    p_noise = float(norm.sf((threshold - split_evenly) / sigma_threshold))
    p_unanimous = float(norm.sf((threshold - teachers) / sigma_threshold))
    advice = (
        f"choose T well below the teacher count and σ₁ small next to the gap (e.g. T ≈ "
        f"{0.7 * teachers:.3g}, σ₁ ≤ {max(0.1 * teachers, 1.0):.3g}), or add teachers"
    )
    if threshold >= teachers:
        return (
            f"the threshold T = {threshold:g} is not below the {teachers} teachers: no query "
            f"passes on the votes alone, so every answered query (even a unanimous one passes "
            f"only with probability {p_unanimous:.0%}) is answered by noise and still costs ε; "
            f"{advice}"
        )
    if threshold > split_evenly and p_noise > NOISE_PASS_LIMIT:
        return (
            f"with T = {threshold:g}, σ₁ = {sigma_threshold:g} and {teachers} teachers, noise "
            f"alone passes {p_noise:.0%} of the queries the teachers split evenly on: those "
            f"labels carry no consensus and cost ε; {advice}"
        )
    return None


FEW_STEPS = 20  # fewer noisy steps than this barely move an adapter


def few_steps_warning(steps: int, sample_rate: float, units: int, batch_size: int) -> str | None:
    """A warning when a DP-SGD run takes fewer than :data:`FEW_STEPS` steps (a batch size
    near the data size makes q ≈ 1 and one step an epoch): it pays its ε and learns almost
    nothing. None when the run has steps enough."""
    if steps >= FEW_STEPS:
        return None
    per_epoch = max(1, round(1 / sample_rate)) if sample_rate > 0 else 1
    smaller = max(1, units // 20)
    return (
        f"only {steps} noisy step{'s' if steps != 1 else ''} (q = {sample_rate:.3g}: a batch "
        f"of {batch_size} of {units} units, {per_epoch} step{'s' if per_epoch != 1 else ''} "
        "an epoch): the adapter will barely move for its ε. Lower --batch-size (e.g. "
        f"{smaller}) or raise --epochs so the run takes at least {FEW_STEPS} steps."
    )
