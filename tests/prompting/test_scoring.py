"""Prompted classification: templates, verbalizers, batched scoring, calibration, black box."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from privlm.data import Record
from privlm.errors import PrivlmError
from privlm.prompting.scoring import (
    OTHER,
    blackbox_answers,
    calibrate,
    label_probabilities,
    next_token_logits,
    score_prompts,
)
from privlm.prompting.tasks import TASKS, build_prompt, get_task, label_token_ids


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_task_has_distinct_label_tokens(tiny, name):
    task = get_task(name)
    ids = label_token_ids(task, tiny.tokenizer)
    assert len(ids) == len(task.labels) == len(set(ids))


@pytest.mark.fast
def test_unknown_task():
    with pytest.raises(PrivlmError, match="unknown task"):
        get_task("mnli")


@pytest.mark.fast
def test_a_one_shot_prompt():
    task = get_task("sst2")
    demo = Record("a gem", "r1", "positive")
    prompt = build_prompt(task, [demo], Record("dull", "r2", "negative"))
    assert prompt == "Review: a gem\nSentiment: Positive\n\nReview: dull\nSentiment:"
    nli = get_task("rte")
    q = Record("It rained.", "r", "entailment", None, {"hypothesis": "It was wet"})
    assert nli.template(q).endswith("It was wet True or False?\nanswer:")


def test_left_padded_batches_score_like_single_prompts(tiny):
    prompts = ["Review: fine\nSentiment:", "Review: a much longer review of a film\nSentiment:"]
    batched = next_token_logits(tiny.model, tiny.tokenizer, prompts, batch_size=2)
    for i, p in enumerate(prompts):
        ids = torch.tensor([tiny.tokenizer(p, add_special_tokens=False)["input_ids"]])
        alone = tiny.model(input_ids=ids).logits[0, -1]
        assert torch.allclose(batched[i], alone, atol=1e-4)


def test_batches_group_prompts_by_length_and_keep_their_order(tiny):
    prompts = [f"Review: {'very ' * n}good\nSentiment:" for n in (5, 0, 9, 1, 3)]
    batched = next_token_logits(tiny.model, tiny.tokenizer, prompts, batch_size=2)
    alone = torch.cat([next_token_logits(tiny.model, tiny.tokenizer, [p]) for p in prompts])
    assert batched.dtype == torch.float32 and torch.allclose(batched, alone, atol=1e-4)
    scores = score_prompts(tiny.model, tiny.tokenizer, prompts, [26990, 20085], batch_size=3)
    assert torch.equal(scores.top1, alone.argmax(-1))
    assert torch.allclose(scores.label_logits, alone[:, [26990, 20085]], atol=1e-4)


def test_label_probabilities_are_the_softmax_over_label_tokens(tiny):
    prompts = ["Review: fine\nSentiment:"]
    ids = [26990, 20085]
    probs = label_probabilities(tiny.model, tiny.tokenizer, prompts, ids)
    logits = next_token_logits(tiny.model, tiny.tokenizer, prompts)[0, ids].double()
    assert np.allclose(probs[0], torch.softmax(logits, -1).numpy())


@pytest.mark.fast
def test_contextual_calibration_divides_by_the_content_free_probabilities():
    probs = np.array([[0.8, 0.2], [0.6, 0.4]])
    free = np.array([[0.7, 0.3], [0.5, 0.5]])  # mean (0.6, 0.4)
    out = calibrate(probs, free)
    expect = np.array([[0.8 / 0.6, 0.2 / 0.4], [1.0, 1.0]])
    assert np.allclose(out, expect / expect.sum(1, keepdims=True))


class FixedTop1(torch.nn.Module):
    """A 'model' whose top-1 next token is given per prompt."""

    def __init__(self, tops):
        super().__init__()
        self.tops = tops

    def forward(self, input_ids, attention_mask=None, position_ids=None):
        logits = torch.zeros(input_ids.size(0), input_ids.size(1), 50)
        for i, t in enumerate(self.tops[: input_ids.size(0)]):
            logits[i, -1, t] = 10.0
        self.tops = self.tops[input_ids.size(0) :]
        return type("Out", (), {"logits": logits})


def test_black_box_answers_that_are_no_label_are_other(tiny):
    answers = blackbox_answers(FixedTop1([7, 3, 9]), tiny.tokenizer, ["a", "b", "c"], [3, 7])
    assert answers.tolist() == [1, 0, OTHER]
