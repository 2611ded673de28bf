"""``privlm data fetch``: the benchmark corpora, downloaded from pinned public sources.

The corpora do not ship with privlm (see docs/data.md). Each file is fetched from a public
GitHub repository at a fixed commit (the same snapshots listed in the corpora's manifest),
checked byte for byte against its SHA-256, and stored gzip-compressed (mtime 0, so the
result is reproducible) in the layout :mod:`privlm.data.corpora` reads. Nothing is trusted
that does not hash to the pinned value; a partly written file never replaces a good one.

``PRIVLM_DATA_MIRROR`` (or ``base_url``) replaces ``https://raw.githubusercontent.com`` for
users behind a proxy that mirrors it (the test suite uses a local server).
"""

from __future__ import annotations

import gzip
import hashlib
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from privlm.errors import DataError, PrivlmError

GITHUB_RAW = "https://raw.githubusercontent.com"
_PYTORCH = "pytorch/examples/77f55b912142e11fcfdf5b530231fb9c52f181e8/word_language_model/data"
_SDP = "wyshi/sdp_transformers/67f51dacb983f17926a3376ec10b374c0ef0588a/data"
_CBU = "tonyzhaozh/few-shot-learning/e04d8643be91c2cce63f33e07760ff75d5aa3ad0/data"
_CONLL = "synalp/NER/c0ea07c81ec3512b5047dcd804b0ac2b10a3bdfc/corpus/CoNLL-2003"


@dataclass(frozen=True)
class RemoteFile:
    """One corpus file: where it goes under the data directory, where it comes from (a path
    under the raw-content host) and the SHA-256 of its uncompressed bytes."""

    target: str
    source: str
    sha256: str
    size: int


def _f(target: str, source: str, sha256: str, size: int) -> RemoteFile:
    return RemoteFile(target, source, sha256, size)


SOURCES: dict[str, tuple[RemoteFile, ...]] = {
    "wikitext2": (
        _f("wikitext2/raw/train.txt.gz", f"{_SDP}/wikitext-2-raw/train.txt",
           "6707892fa3788b5ab9ed78ab5ff37d9fe825f6011a2ad4fcd6a6d467f0e7da57", 10940747),
        _f("wikitext2/raw/valid.txt.gz", f"{_SDP}/wikitext-2-raw/valid.txt",
           "4cd0f6876d07a413aa911261ff6d363c72d757d47f0fdd6015702014c89cb9c7", 1146846),
        _f("wikitext2/raw/test.txt.gz", f"{_SDP}/wikitext-2-raw/test.txt",
           "173c87a53759e0201f33e0ccf978e510c2042d7f2cb78229d9a50d79b9e7dd08", 1290590),
        _f("wikitext2/tokens/train.txt.gz", f"{_PYTORCH}/wikitext-2/train.txt",
           "9e9fa1ad55b1c2c95b08e37dd8e653f638fac2c6de904b79e813611eefbc985f", 10797148),
        _f("wikitext2/tokens/valid.txt.gz", f"{_PYTORCH}/wikitext-2/valid.txt",
           "f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8", 1121681),
        _f("wikitext2/tokens/test.txt.gz", f"{_PYTORCH}/wikitext-2/test.txt",
           "d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0", 1256449),
    ),
    "sst2": (
        _f("fewshot_cbu/sst2/stsa.binary.train.gz", f"{_CBU}/sst2/stsa.binary.train",
           "71c04bcc41291fa47454dd670df701b14ee9249156babeaac404cfe2c8d74338", 738844),
        _f("fewshot_cbu/sst2/stsa.binary.dev.gz", f"{_CBU}/sst2/stsa.binary.dev",
           "02fedc82855dbdcabe82c65ed1af6c6570788eaac51073cdb35ee8c7784426d1", 94400),
        _f("fewshot_cbu/sst2/stsa.binary.test.gz", f"{_CBU}/sst2/stsa.binary.test",
           "6a80dc9b9a0db2d3b37f2f809304febad31c90ab67a5b4157b7d9f881c53ef5b", 193562),
    ),
    "trec": (
        _f("fewshot_cbu/trec/train.txt.gz", f"{_CBU}/trec/train.txt",
           "202e3e1ad6143ed4f147f199324277e25b2573a78c08c3af1ff840b49c0779de", 335859),
        _f("fewshot_cbu/trec/test.txt.gz", f"{_CBU}/trec/test.txt",
           "69b2d406aa15b3b514b6bf9b3bf1fa2c3515ce7ae744651173f8e57347bfb2a9", 23353),
    ),
    "agnews": (
        _f("fewshot_cbu/agnews/test.csv.gz", f"{_CBU}/agnews/test.csv",
           "1b1b6c5f1dd034c83fec3f585611d2bc65c34fafd86685fc92cee5e6059313ef", 1824188),
    ),
    "cb": (
        _f("fewshot_cbu/cb/train.jsonl.gz", f"{_CBU}/cb/train.jsonl",
           "32017480d3a10508646e3efd64502c639f13d4d15077f278d2fd0992c33a3126", 99499),
        _f("fewshot_cbu/cb/val.jsonl.gz", f"{_CBU}/cb/val.jsonl",
           "c6125587e9601560cb16ea223c33964c5a915568d2af68a81f651b6ef25395ec", 24598),
        _f("fewshot_cbu/cb/test.jsonl.gz", f"{_CBU}/cb/test.jsonl",
           "860679c4ef6f56758f5530bfbcbf2fd7905667184144f3594ace9bb4c435618d", 99881),
    ),
    "rte": (
        _f("fewshot_cbu/rte/train.jsonl.gz", f"{_CBU}/rte/train.jsonl",
           "fdfb03443abe3ec0424b7fc5d1a8863361719bc061338b7a63e56b94d615f201", 977550),
        _f("fewshot_cbu/rte/val.jsonl.gz", f"{_CBU}/rte/val.jsonl",
           "ab990507bf5f35dc176cba7770a72bfa2c50a88ed72b8cc95cfbf9db95ab1af1", 104895),
        _f("fewshot_cbu/rte/test.jsonl.gz", f"{_CBU}/rte/test.jsonl",
           "fb4025a8b072862f0323423dff1de8980a024bfb8775e09c80ff3cf1c77677b1", 1056063),
    ),
    "conll2003": (
        _f("conll2003/eng.train.gz", f"{_CONLL}/eng.train",
           "eac0822f501353f265383ddf1edb0dcd42a1b6eefd3e383d7074db98c38eb41c", 3281528),
        _f("conll2003/eng.testa.gz", f"{_CONLL}/eng.testa",
           "aedc4ccbd1ae9795feaa0e86fe72d195b0258abed9d705b630d1c889276fac1e", 827012),
        _f("conll2003/eng.testb.gz", f"{_CONLL}/eng.testb",
           "0632f32c090ef31c223135b7fee3187a7cf8e65c4015c7866bb7783428cdd9a6", 748096),
    ),
}  # fmt: skip

LICENCES = {
    "wikitext2": "CC BY-SA 3.0 (Merity et al. 2016)",
    "sst2": "the Stanford Sentiment Treebank's terms (Socher et al. 2013)",
    "trec": "TREC question classification (Li and Roth 2002), research use",
    "agnews": "AG's corpus, non-commercial research use",
    "cb": "CommitmentBank, SuperGLUE terms",
    "rte": "RTE, SuperGLUE terms",
    "conll2003": "Reuters RCV1 via NIST: research use only, do not redistribute",
}

Reporter = Callable[[str], None]


def base_url() -> str:
    """The raw-content host (``PRIVLM_DATA_MIRROR`` overrides it)."""
    return os.environ.get("PRIVLM_DATA_MIRROR", GITHUB_RAW).rstrip("/")


def is_present(root: Path, f: RemoteFile) -> bool:
    """Whether ``f`` is under ``root`` with the pinned content."""
    path = root / f.target
    if not path.is_file():
        return False
    try:
        with gzip.open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest() == f.sha256
    except (OSError, EOFError):
        return False


def _download(url: str, f: RemoteFile, timeout: float) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            body: bytes = resp.read()
    except (urllib.error.URLError, OSError) as exc:
        raise PrivlmError(
            f"could not download {f.target} from {url} ({exc}); check the network, set "
            "PRIVLM_DATA_MIRROR to a mirror of raw.githubusercontent.com, or place the file "
            "yourself (docs/data.md)"
        ) from exc
    digest = hashlib.sha256(body).hexdigest()
    if digest != f.sha256:
        raise DataError(url, f"SHA-256 {digest} is not the pinned {f.sha256}; nothing was stored")
    return body


def _store(root: Path, f: RemoteFile, body: bytes) -> None:
    path = root / f.target
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
        gz.write(body)
    os.replace(tmp, path)


def fetch(
    names: Iterable[str],
    root: Path,
    *,
    report: Reporter = lambda _: None,
    timeout: float = 60.0,
) -> list[str]:
    """Download the named corpora into ``root``; returns the files written (files already
    present with the pinned content are kept)."""
    names = list(names)
    unknown = [n for n in names if n not in SOURCES]
    if unknown:
        raise PrivlmError(
            f"unknown corpus {', '.join(unknown)}; known: {', '.join(sorted(SOURCES))}"
        )
    written: list[str] = []
    host = base_url()
    for name in names:
        for f in SOURCES[name]:
            if is_present(root, f):
                report(f"{f.target}: present")
                continue
            report(f"{f.target}: downloading {f.size / 1e6:.1f} MB")
            _store(root, f, _download(f"{host}/{f.source}", f, timeout))
            written.append(f.target)
    return written
