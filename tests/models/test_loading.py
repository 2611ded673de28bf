"""Loading by local directory and hub id, with errors that say what to do."""

from __future__ import annotations

import pytest
import torch

from privlm.errors import ModelLoadError
from privlm.models import load_public_model, loading


def test_local_directory_round_trip(tiny, tmp_path):
    tiny.model.save_pretrained(tmp_path / "m")
    tiny.tokenizer.save_pretrained(tmp_path / "m")
    again = load_public_model(str(tmp_path / "m"))
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        assert torch.allclose(tiny.model(ids).logits, again.model(ids).logits)
    assert again.source == str(tmp_path / "m")


@pytest.mark.fast
def test_directory_without_model(tmp_path):
    with pytest.raises(ModelLoadError, match=r"no config\.json"):
        load_public_model(str(tmp_path))


@pytest.mark.fast
def test_missing_local_path():
    with pytest.raises(ModelLoadError, match="no such directory"):
        load_public_model("./definitely/not/here")


@pytest.mark.fast
def test_unreachable_hub_suggests_a_local_path(monkeypatch):
    monkeypatch.setattr(loading, "_hub_reachable", lambda timeout=3.0: False)
    with pytest.raises(ModelLoadError) as err:
        load_public_model("some-org/some-model-that-is-not-cached")
    msg = str(err.value)
    assert "could not fetch 'some-org/some-model-that-is-not-cached'" in msg
    assert "local directory" in msg and "smollm2-135m" in msg
