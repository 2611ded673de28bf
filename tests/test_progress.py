"""Watched progress bars: a listener hears every update, enabled or disabled, loop or
manual, and learns the total before the first step."""

from __future__ import annotations

import pytest

from privlm.progress import progress_bar, watch

pytestmark = pytest.mark.fast


def test_listener_hears_manual_updates_and_the_total_first():
    heard = []
    with watch(lambda d, n, t: heard.append((d, n, t))):
        bar = progress_bar(total=3, desc="train", disable=True)
        bar.update(1)
        bar.update(2)
        bar.close()
    assert heard == [("train", 0, 3), ("train", 1, 3), ("train", 3, 3)]


def test_listener_hears_iteration_and_initial():
    heard = []
    with watch(lambda d, n, t: heard.append(n)):
        for _ in progress_bar(range(3), desc="loop", disable=True):
            pass
        progress_bar(total=5, initial=2, desc="resumed", disable=True).close()
    assert heard == [0, 1, 2, 3, 2]


def test_no_listener_outside_watch():
    heard = []
    with watch(lambda *a: heard.append(a)):
        pass
    progress_bar(total=1, disable=True).update(1)
    assert heard == []
