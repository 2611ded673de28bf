"""Each DClip text's own ledger is capped at the text's share of the run's budget, not at
the whole ε: where a unit reaches L texts (one batch per label), one text may spend 1/L
of the zCDP budget, and its planned tokens fit that cap exactly, with the calibration
margin to spare (privlm.accounting.analysis.bounded_range.share_epsilon)."""

from __future__ import annotations

import pytest

from privlm.accounting import Budget, Charge, PrivacyLedger, Relation
from privlm.errors import BudgetExceededError
from privlm.synth import SynthConfig


@pytest.mark.fast
@pytest.mark.parametrize("epsilon", [0.5, 2.0, 8.0])
@pytest.mark.parametrize(("members", "max_tokens"), [(3, 4), (16, 48)])
@pytest.mark.parametrize("texts", [1, 2, 6])
def test_a_texts_planned_tokens_fill_its_share_and_one_more_is_refused(
    tmp_path, epsilon, members, max_tokens, texts
):
    cfg = SynthConfig(mechanism="dclip", epsilon=epsilon, members=members,
                      max_tokens=max_tokens).for_texts_per_unit(texts)  # fmt: skip
    share = cfg.dclip_text_epsilon
    ledger = PrivacyLedger(tmp_path / "t.db", "text-0", Budget(share, cfg.delta))
    token = Charge("synth-dclip", rdp=cfg.token_curve, relation=Relation.UNIT)
    for _ in range(max_tokens):
        ledger.charge(token)  # every planned token fits
    assert ledger.spent().epsilon == pytest.approx(share, rel=1e-6)
    with pytest.raises(BudgetExceededError):
        ledger.charge(token)
    if texts == 1:
        assert share == pytest.approx(epsilon, rel=1e-6) and share <= epsilon
    else:  # the cap is the share: the whole ε would let a text overspend L-fold
        whole = SynthConfig(mechanism="dclip", epsilon=epsilon).dclip_text_epsilon
        assert share < whole


def test_a_dclip_run_caps_each_texts_ledger_at_its_share(tiny, tmp_path):
    from privlm.data import Dataset, Record
    from privlm.synth import synthesize
    from privlm.synth.run import run_folder

    recs = [Record(f"the film {i} was {'fine' if i % 2 else 'dull'}", f"user-{i % 6}",
                   "pos" if i % 2 else "neg") for i in range(24)]  # fmt: skip
    cfg = SynthConfig(mechanism="dclip", epsilon=4.0, count=2, max_tokens=3, members=3,
                      prompt_tokens=24)  # fmt: skip
    out = tmp_path / "s.jsonl"
    synthesize(tiny, Dataset(recs, "mem", "user"), out, cfg, labels=["neg", "pos"],
               progress=False)  # fmt: skip
    text = PrivacyLedger(run_folder(out) / "texts.db", "text-0")
    share = cfg.for_texts_per_unit(2).dclip_text_epsilon  # a user is in both labels' batches
    assert text.budget.epsilon == pytest.approx(share) and share < 4.0
    assert 0 < text.spent().epsilon <= share
