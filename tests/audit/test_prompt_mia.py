"""The prompt membership-inference attack: AUC against brute-force pair counting; a prompt
that memorises its demonstration is caught, a student without private data is not."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from privlm.audit.prompt_mia import auc, prompt_mia, student_mia
from privlm.data import Record
from privlm.errors import PrivlmError
from privlm.prompting.tasks import get_task


@pytest.mark.fast
def test_auc_is_the_pairwise_win_rate_with_half_ties():
    rng = np.random.default_rng(0)
    m = rng.integers(0, 5, size=7).astype(float)
    n = rng.integers(0, 5, size=11).astype(float)
    wins = sum((a > b) + 0.5 * (a == b) for a, b in itertools.product(m, n))
    assert auc(m, n) == pytest.approx(wins / (7 * 11))
    assert auc([1.0], [0.0, 0.5]) == 1.0 and auc([0.0], [1.0]) == 0.0
    with pytest.raises(PrivlmError):
        auc([], [1.0])


def pool(n=60):
    words = ["good", "bad", "fine", "poor", "superb", "dire"]
    return [
        Record(f"{words[i % 6]} movie number {i}", f"r{i}", "positive" if i % 2 else "negative")
        for i in range(n)
    ]


def test_prompt_mia_runs_and_reports_an_auc(tiny):
    res = prompt_mia(
        tiny.model,
        tiny.tokenizer,
        get_task("sst2"),
        pool(),
        prompts=3,
        nonmembers=10,
        progress=False,
    )
    assert 0.0 <= res.auc <= 1.0 and res.prompts == 3 and res.nonmembers_per_prompt == 10


def test_student_mia_uses_the_private_demos_as_members(tiny):
    p = pool()
    res = student_mia(tiny.model, tiny.tokenizer, get_task("sst2"), [p[0]], p[1:6], p[6:30])
    assert res.members_per_prompt == 5 and res.nonmembers_per_prompt == 24
    assert 0.0 <= res.auc <= 1.0


@pytest.mark.fast
def test_auc_standard_error_matches_the_spread_under_the_null():
    """Hanley–McNeil's SE against the empirical spread of AUCs of random scores."""
    import numpy as np

    from privlm.audit.prompt_mia import auc, auc_standard_error

    rng = np.random.default_rng(0)
    draws = [auc(rng.normal(size=30), rng.normal(size=60)) for _ in range(4000)]
    assert auc_standard_error(0.5, 30, 60) == pytest.approx(np.std(draws), rel=0.1)
    assert auc_standard_error(0.9, 30, 60) < auc_standard_error(0.5, 30, 60)
