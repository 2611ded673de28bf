"""The service's documentation runs as written: every ``curl`` of docs/service.md, in the
page's order, then the README's service examples, against a live ``privlm serve --model
tiny``. Each answer's HTTP status must be the one the doc states beside its command
(``# → 201``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.service.live import LiveServer

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"```sh\n(.*?)```", re.S)
EXPECTED = re.compile(r"#\s*→\s*(\d{3})")
# every curl of the scripts reports its status on stderr, where the doc's reader sees none
RECORDING = "curl() { command curl -w '%{stderr}HTTP %{http_code}\\n' \"$@\"; }\n"


def curl_blocks(doc: Path) -> list[str]:
    """The doc's shell blocks that call the service, in order."""
    return [b for b in BLOCK.findall(doc.read_text()) if "curl " in b]


def statements(script: str) -> list[str]:
    """Top-level statements (continuation lines joined), function definitions left out."""
    out, buf, in_function = [], "", False
    for line in script.splitlines():
        if re.match(r"^\w+\(\) \{", line):
            in_function = not line.rstrip().endswith("}")
            continue
        if in_function:
            in_function = line.strip() != "}"
            continue
        buf += line + "\n"
        if not line.rstrip().endswith("\\") and buf.count("'") % 2 == 0:
            out.append(buf)
            buf = ""
    return out


def expected_statuses(script: str) -> list[int]:
    """The status each ``curl`` statement is said to answer, in order; one without is a
    failure of the doc."""
    codes = []
    for st in statements(script):
        if re.search(r"(^|\$\(|\s)curl ", st) and not st.lstrip().startswith("#"):
            found = EXPECTED.search(st)
            assert found, f"a curl without its status in the doc: {st.strip()[:120]}"
            codes.append(int(found.group(1)))
    return codes


def files(folder: Path) -> None:
    """The files the docs upload, as a user would have them."""
    (folder / "notes.txt").write_text(
        "\n".join(f"patient {i} was seen on monday and feels better today" for i in range(80))
    )
    (folder / "old-notes.txt").write_text("\n".join(f"an old note number {i}" for i in range(20)))
    tickets = [
        {"text": f"ticket {i}: {'the invoice is wrong' if i % 2 else 'the site is down'}",
         "label": "billing" if i % 2 else "outage", "channel": "mail" if i % 3 else "chat"}
        for i in range(40)
    ]  # fmt: skip
    (folder / "tickets.jsonl").write_text("\n".join(json.dumps(t) for t in tickets))
    headlines = [{"text": f"headline number {i}", "channel": "news"} for i in range(30)]
    (folder / "headlines.jsonl").write_text("\n".join(json.dumps(h) for h in headlines))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = LiveServer(tmp_path_factory.mktemp("docs-svc")).start()
    yield srv
    srv.stop()


@pytest.mark.timeout(900)
def test_the_service_docs_run_as_written(server, tmp_path):
    service_md = curl_blocks(ROOT / "docs" / "service.md")
    readme = curl_blocks(ROOT / "README.md")
    assert len(service_md) >= 5 and len(readme) == 1
    script = "\n".join(service_md + readme)
    expected = expected_statuses(script)
    files(tmp_path)
    admin = server.cli("service", "admin-keys", "add").split()[-1]
    env = {**os.environ, "KEY": server.tenant("docs"), "ADMIN": admin, "S": server.url}
    run = subprocess.run(
        ["bash", "-e", "-c", RECORDING + script],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=840,
    )  # fmt: skip
    got = [int(m) for m in re.findall(r"^HTTP (\d{3})$", run.stderr, re.M)]
    assert run.returncode == 0, run.stderr[-3000:]
    assert got == expected, (got, expected, run.stdout[-3000:])
