"""PromptPATE end to end on the tiny model: the artefact is the student prompt built from
public data, its statement matches the ledger, and no private text is in it."""

from __future__ import annotations

import json

import pytest
import torch

from privlm.accounting.advice import suggested_delta
from privlm.data import Record
from privlm.models import load_public_model
from privlm.prompting.pate_pipeline import (
    PateExamples,
    PromptPateConfig,
    pate_ledger,
    run_prompt_pate,
)
from privlm.prompting.tasks import get_task


def recs(prefix, n):
    words = ["good", "bad", "fine", "poor"]
    return [
        Record(f"{prefix} {words[i % 4]} {i}", f"{prefix}{i}", "positive" if i % 2 else "negative")
        for i in range(n)
    ]


@pytest.mark.parametrize("accounting", ["data-independent"])
def test_prompt_pate_end_to_end(tmp_path, monkeypatch, accounting):
    import numpy as np

    from privlm.prompting import pate_pipeline

    def answers(lm, task, teachers, public, batch_size, progress):
        # the random tiny model rarely says a label word: teachers answer by the query's
        # second word ("good"/"fine" positive), and "other" now and then in black-box mode
        labels = np.array([1 if r.text.split()[1] in ("good", "fine") else 0 for r in public])
        top1 = labels.copy()
        top1[::7] = -1
        rows = len(teachers)
        return pate_pipeline.TeacherAnswers(np.tile(top1, (rows, 1)), np.tile(labels, (rows, 1)))

    monkeypatch.setattr(pate_pipeline, "teacher_answer_matrix", answers)
    lm = load_public_model("tiny")
    task = get_task("sst2")
    private, public = recs("secret", 60), recs("public", 30)
    cfg = PromptPateConfig(
        teachers=20, threshold=5, sigma_threshold=2, sigma=4, epsilon=50, student_candidates=3,
        holdout=5, batch_size=16, accounting=accounting, queries=24, seed=0,
    )  # fmt: skip
    led = pate_ledger(tmp_path / "l.db", "pate", cfg, len(private))
    res = run_prompt_pate(
        lm, PateExamples(task, private, public), tmp_path / "out", cfg, ledger=led, progress=False
    )
    assert res.queries == 24  # fixed before the votes: the first 24 public inputs
    assert led.count() == 24
    assert res.epsilon == led.spent().epsilon <= 50
    assert res.accounting == accounting
    assert res.delta == suggested_delta(60) == 1e-6  # not 1/N
    saved = (tmp_path / "out" / "student_prompt.json").read_text()
    assert "secret" not in saved  # the student is built from public inputs only
    statement = json.loads((tmp_path / "out" / "privacy.json").read_text())
    assert statement["epsilon"] == res.epsilon and statement["teachers"] == 20
    assert statement["accounting"].startswith(accounting)
    card = (tmp_path / "out" / "README.md").read_text()  # the student's card
    assert "-DP per record or user" in card and "Confident-GNMax" in card
    assert "Data size:** 60 units" in card
    assert res.other_rate == np.mean(np.arange(24) % 7 == 0)


def test_label_votes_never_vote_other_and_cost_the_same(tmp_path):
    """With calibrated label-argmax teachers the histogram sums to the number of teachers
    (no OTHER); the accounting is unchanged since every teacher still casts one vote."""
    import numpy as np

    from privlm.prompting.pate import make_teachers
    from privlm.prompting.pate_pipeline import teacher_answer_matrix
    from privlm.prompting.scoring import OTHER

    lm = load_public_model("tiny")
    task = get_task("sst2")
    teachers = make_teachers(recs("s", 18), 6, 1, "ab" * 16)
    both = teacher_answer_matrix(lm, task, teachers, recs("p", 5), 8, False)
    assert both.top1.shape == both.labels.shape == (6, 5)
    voting = [i for i, t in enumerate(teachers) if not t.abstains]
    assert voting and set(np.unique(both.labels[voting])) <= {0, 1}
    for i in set(range(6)) - set(voting):  # an empty teacher abstains: votes for nothing
        assert (both.top1[i] == OTHER).all() and (both.labels[i] == OTHER).all()
    assert both.votes("labels") is both.labels and both.votes("top1") is both.top1


def test_pooled_teacher_scoring_equals_scoring_each_teacher_alone():
    """All teachers' prompts are scored in shared, length-sorted batches; every
    teacher's answers must be what its own full-vocabulary logits give."""

    from privlm.prompting.pate import make_teachers, teacher_prompts
    from privlm.prompting.pate_pipeline import teacher_answer_matrix
    from privlm.prompting.scoring import CONTENT_FREE, calibrate, next_token_logits, top1_classes
    from privlm.prompting.tasks import label_token_ids

    lm = load_public_model("tiny")
    task = get_task("sst2")
    teachers = make_teachers(recs("s", 15), 5, 1, "cd" * 16)
    public = recs("p", 4)
    both = teacher_answer_matrix(lm, task, teachers, public, 7, False)
    ids = label_token_ids(task, lm.tokenizer)
    free = [Record(c, "content-free", None, None, {"hypothesis": c}) for c in CONTENT_FREE]
    for i, t in enumerate(teachers):
        if t.abstains:
            continue
        logits = next_token_logits(
            lm.model, lm.tokenizer, teacher_prompts(task, t, [*public, *free]), 1
        )
        assert (both.top1[i] == top1_classes(logits[:4].argmax(-1), ids)).all()
        probs = torch.softmax(logits[:, ids].double(), -1).numpy()
        assert (both.labels[i] == calibrate(probs[:4], probs[4:]).argmax(-1)).all()


@pytest.mark.fast
def test_unknown_teacher_votes_mode_is_refused():
    import pytest

    from privlm.errors import PrivlmError

    with pytest.raises(PrivlmError, match="teacher_votes"):
        PromptPateConfig(teacher_votes="logits")


def test_too_few_labels_is_a_clear_error(tmp_path):
    import pytest

    from privlm.errors import PrivlmError

    cfg = PromptPateConfig(
        teachers=5, threshold=1000, sigma_threshold=1, sigma=1, epsilon=50,
        accounting="data-independent",
    )  # fmt: skip
    led = pate_ledger(tmp_path / "l.db", "pate", cfg, 10)
    with pytest.raises(PrivlmError, match="were labelled"):
        run_prompt_pate(
            "tiny",  # a name works as well as a loaded model
            PateExamples(get_task("sst2"), recs("s", 10), recs("p", 4)),
            tmp_path / "o",
            cfg,
            ledger=led,
            progress=False,
        )
    assert not (tmp_path / "o").exists()


def test_teachers_answer_from_a_bf16_model_with_float64_votes():
    """Teachers scored on a bf16 model (a GPU's default) give answers in the
    same classes; the calibration runs in float64 on upcast label logits."""
    import numpy as np

    from privlm.prompting.pate import make_teachers
    from privlm.prompting.pate_pipeline import teacher_answer_matrix

    lm = load_public_model("tiny", device="cpu", dtype="bfloat16")
    task = get_task("sst2")
    teachers = make_teachers(recs("s", 12), 4, 1, "ef" * 16)
    both = teacher_answer_matrix(lm, task, teachers, recs("p", 4), 8, False)
    voting = [i for i, t in enumerate(teachers) if not t.abstains]
    assert voting and set(np.unique(both.labels[voting])) <= {0, 1}


def _voting_alike(monkeypatch):
    """Teachers that answer by the query's second word (the random tiny model rarely says a
    label word), and a record of how often they were asked."""
    import numpy as np

    from privlm.prompting import pate_pipeline

    asked: list[int] = []

    def answers(lm, task, teachers, public, batch_size, progress):
        asked.append(len(public))
        labels = np.array([1 if r.text.split()[1] in ("good", "fine") else 0 for r in public])
        rows = len(teachers)
        return pate_pipeline.TeacherAnswers(np.tile(labels, (rows, 1)), np.tile(labels, (rows, 1)))

    monkeypatch.setattr(pate_pipeline, "teacher_answer_matrix", answers)
    return asked


def test_a_budget_that_affords_fewer_queries_than_asked_is_refused_with_the_number(
    tmp_path, monkeypatch
):
    """σ1 = σ2 = 2 on ε 8 affords a handful of 300 queries: refused before any vote and any
    charge, naming how many it affords (it would spend and release nothing useful)."""
    from privlm.accounting import data_independent_query_curve
    from privlm.errors import BudgetExceededError

    asked = _voting_alike(monkeypatch)
    cfg = PromptPateConfig(teachers=20, sigma_threshold=2, sigma=2, epsilon=8, threshold=5)
    led = pate_ledger(tmp_path / "l.db", "pate", cfg, 60)
    worst = data_independent_query_curve(2, 2)
    fits = max(k for k in range(1, 300) if worst.times(k).to_dp(led.budget.delta).epsilon <= 8)
    with pytest.raises(BudgetExceededError, match=f"affords {fits} of the 300"):
        run_prompt_pate(
            load_public_model("tiny"), PateExamples(get_task("sst2"), recs("s", 60), recs("p", 300)),
            tmp_path / "o", cfg, ledger=led, progress=False,
        )  # fmt: skip
    assert led.count() == 0 and asked == [] and not (tmp_path / "o").exists()


def test_a_job_restarted_after_its_labels_were_charged_resumes_without_paying_twice(
    tmp_path, monkeypatch
):
    """A service job killed after charging some of its labels (nothing released) restarts
    on its job-tagged ledger: the charged queries are drawn again under their charges, the
    rest charged once, and the budget that fitted the whole plan still fits it."""
    from privlm.prompting import pate as pate_module

    _voting_alike(monkeypatch)
    cfg = PromptPateConfig(
        teachers=20, threshold=5, sigma_threshold=20, sigma=10, epsilon=50, student_candidates=3,
        holdout=5, queries=24, seed=0,
    )  # fmt: skip
    worst = pate_module.data_independent_query_curve(20, 10)
    budget = worst.times(24).to_dp(suggested_delta(60)).epsilon * 1.0001  # 24 queries, no more
    cfg = PromptPateConfig(**{**cfg.__dict__, "epsilon": budget})
    led = pate_ledger(tmp_path / "l.db", "pate", cfg, 60).tagged(job="job-1")
    data = PateExamples(get_task("sst2"), recs("secret", 60), recs("public", 30))
    real = pate_module.label_with_confident_gnmax

    def killed(hist, threshold, s1, s2, plan, teachers, rng):  # dies after 10 charged labels
        for charge in plan.budget.planned[:10]:
            plan.budget.release(charge, lambda: None)
        raise KeyboardInterrupt

    monkeypatch.setattr(pate_module, "label_with_confident_gnmax", killed)
    from privlm.prompting import pate_pipeline

    monkeypatch.setattr(pate_pipeline, "label_with_confident_gnmax", killed)
    with pytest.raises(KeyboardInterrupt):
        run_prompt_pate("tiny", data, tmp_path / "out", cfg, ledger=led, progress=False)
    assert led.count() == 10
    monkeypatch.setattr(pate_pipeline, "label_with_confident_gnmax", real)
    res = run_prompt_pate("tiny", data, tmp_path / "out", cfg, ledger=led, progress=False)
    assert res.queries == 24 and led.count() == 24  # 10 + 14: none charged twice
    assert res.epsilon == led.spent().epsilon <= budget
    fresh = pate_ledger(tmp_path / "l.db", "pate", cfg, 60).tagged(job="job-2")
    with pytest.raises(Exception, match="affords 0 of the 24"):  # another job pays anew
        run_prompt_pate("tiny", data, tmp_path / "o2", cfg, ledger=fresh, progress=False)
