"""``privlm data fetch`` against a local mirror of the pinned sources (this machine reaches
no GitHub): files land in the loaders' layout, hashes are enforced, nothing half-written
stays, and an unset PRIVLM_DATA finds what was fetched."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from privlm import settings
from privlm.cli import app
from privlm.data import corpora
from privlm.data.fetch import SOURCES, fetch, is_present
from privlm.errors import DataError, PrivlmError
from tests.conftest import requires_data

pytestmark = pytest.mark.fast

SMALL = ["trec", "cb"]  # 0.6 MB of text between them


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def serve_mirror(root: Path, names: list[str]) -> Iterator[str]:
    """A raw-content host serving the named staged corpora at their pinned source paths;
    yields its URL."""
    staged = settings.data_dir()
    for name in names:
        for f in SOURCES[name]:
            out = root / f.source
            out.parent.mkdir(parents=True, exist_ok=True)
            with gzip.open(staged / f.target, "rb") as fh:
                out.write_bytes(fh.read())
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


@pytest.fixture()
def mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    root = tmp_path / "mirror"
    with serve_mirror(root, SMALL) as url:
        monkeypatch.setenv("PRIVLM_DATA_MIRROR", url)
        yield root


def test_sources_cover_every_bundled_corpus():
    assert set(SOURCES) == set(corpora.BUNDLED)
    for name, corpus in corpora.BUNDLED.items():
        assert set(corpus.files) <= {f.target for f in SOURCES[name]}


@requires_data
def test_pinned_hashes_match_the_staged_corpora():
    staged = settings.data_dir()
    for files in SOURCES.values():
        for f in files:
            assert is_present(staged, f), f.target


@requires_data
def test_fetch_writes_the_layout_the_loaders_read(mirror, tmp_path, monkeypatch):
    target = tmp_path / "data"
    written = fetch(SMALL, target)
    assert sorted(written) == sorted(f.target for n in SMALL for f in SOURCES[n])
    for f in (f for n in SMALL for f in SOURCES[n]):
        assert (target / f.target).read_bytes()[4:8] == b"\0\0\0\0"  # mtime 0: reproducible
    monkeypatch.setenv("PRIVLM_DATA", str(target))
    assert len(corpora.trec("test")) == 500
    assert len(corpora.cb("val")) == 56
    assert fetch(SMALL, target) == []  # present files are kept, not downloaded again


@requires_data
def test_a_corrupted_download_is_refused_and_nothing_stays(mirror, tmp_path):
    f = SOURCES["trec"][1]
    (mirror / f.source).write_bytes(b"1 tampered\n")
    with pytest.raises(DataError, match="not the pinned"):
        fetch(["trec"], tmp_path / "data")
    assert not (tmp_path / "data" / f.target).exists()
    assert not list((tmp_path / "data").rglob("*.part"))


def test_unreachable_host_and_unknown_name_say_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIVLM_DATA_MIRROR", "http://127.0.0.1:9")  # discard port: refused
    with pytest.raises(PrivlmError, match="PRIVLM_DATA_MIRROR"):
        fetch(["trec"], tmp_path / "data", timeout=2)
    with pytest.raises(PrivlmError, match="known: agnews"):
        fetch(["imdb"], tmp_path / "data")


@requires_data
def test_cli_fetch_into_the_cache_is_found_without_privlm_data(mirror, tmp_path, monkeypatch):
    monkeypatch.delenv("PRIVLM_DATA", raising=False)
    monkeypatch.setenv("PRIVLM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(settings, "_default_data_candidates", lambda: [])  # as installed
    with pytest.raises(PrivlmError, match="privlm data fetch"):
        settings.data_dir()
    result = CliRunner().invoke(app, ["data", "fetch", "trec"])
    assert result.exit_code == 0, result.output
    assert "research use" in result.output
    assert settings.data_dir() == tmp_path / "cache" / "data"
    assert len(corpora.trec("train")) == 5452
    with pytest.raises(DataError) as missing:
        corpora.sst2("train")
    assert "privlm data fetch sst2" in str(missing.value)
    listing = CliRunner().invoke(app, ["data", "list"])
    assert "privlm data fetch NAME" in listing.output
