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


def test_the_tokenizer_is_read_once_per_process_and_again_when_its_file_changes():
    """Every load by name shares one tokenizer (its 3.5 MB file is read once per process);
    a tokenizer file written again since is read again."""
    import os

    from privlm.models.gguf_package import tokenizer_dir
    from privlm.models.registry import DEFAULT_MODEL, KNOWN_MODELS

    first = load_public_model("tiny").tokenizer
    assert load_public_model("tiny").tokenizer is first
    assert loading.load_tokenizer("tiny") is first
    saved = tokenizer_dir(KNOWN_MODELS[DEFAULT_MODEL]) / "tokenizer.json"
    stat = saved.stat()
    os.utime(saved, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000))
    again = loading.load_tokenizer("tiny")
    assert again is not first and again("a b")["input_ids"] == first("a b")["input_ids"]
