"""The perturbation page in headless Chromium (Playwright, Debian's chromium): a file is
perturbed in the browser and only the perturbed text reaches the server (issue 6 §6)."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.service.live import LiveServer

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
ORIGINAL = [
    "Patient zqxjkv Wobblethorpe was admitted on Monday with chest pain",
    "Call qqvbnm Fizzlewick at home about the biopsy results",
    "The account of xxyyzz Plumtree is overdue",
]
SECRETS = ["zqxjkv", "wobblethorpe", "qqvbnm", "fizzlewick", "xxyyzz", "plumtree"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = LiveServer(tmp_path_factory.mktemp("browser-svc"), worker=False).start()
    yield srv
    srv.stop()


def test_only_perturbed_text_leaves_the_browser(server, tmp_path):
    from playwright.sync_api import sync_playwright

    if not shutil.which(CHROMIUM):
        pytest.fail("Debian's chromium is needed (make test installs it)")
    key = server.tenant("browser-tenant")
    src = tmp_path / "notes.txt"
    src.write_text("\n".join(ORIGINAL) + "\n")
    bodies: list[bytes] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page()
        page.on("request", lambda req: bodies.append(req.post_data_buffer or b""))
        randomness = []
        page.expose_function("noteRandom", lambda n: randomness.append(n))
        page.add_init_script(
            "const g = crypto.getRandomValues.bind(crypto);"
            "crypto.getRandomValues = (a) => { window.noteRandom(a.length); return g(a); };"
            "Math.random = () => { throw new Error('Math.random used'); };"
            # every request body the page sends, FormData blobs included, as text
            "window.sentBodies = [];"
            "const f = window.fetch.bind(window);"
            "window.fetch = async (url, opts) => {"
            "  const b = opts && opts.body;"
            "  if (b instanceof FormData) {"
            "    for (const [k, v] of b.entries())"
            "      window.sentBodies.push(k + '=' + (v instanceof Blob ? await v.text() : v));"
            "  } else if (b) { window.sentBodies.push(String(b)); }"
            "  return f(url, opts);"
            "};"
        )
        page.goto(server.url + "/")
        page.fill("#api-key", key)
        page.click("#save-key")
        page.set_input_files("#file", str(src))
        page.select_option("#mechanism", "laplace")
        page.fill("#epsilon", "20")
        page.click("#perturb")
        page.wait_for_selector("#perturb-status:has-text('done')", timeout=60_000)
        per_doc = page.inner_text("#g-doc")
        assert "ε =" in per_doc and "words" in per_doc
        preview = page.inner_text("#preview-table")
        page.click("#upload")
        page.wait_for_selector("#upload-status:has-text('stored as')", timeout=60_000)
        bodies += [b.encode() for b in page.evaluate("window.sentBodies")]
        browser.close()
    assert sum(randomness) > 0  # the noise came from crypto.getRandomValues
    sent = b"".join(bodies).lower()
    assert sent, "the upload request was not seen"
    for secret in SECRETS:
        assert secret.encode() not in sent, secret
    stored = list((server.data_dir / "tenants").rglob("ds_*.txt"))
    assert len(stored) == 1
    text = stored[0].read_text().lower()
    assert len(text.splitlines()) == len(ORIGINAL)
    for secret in SECRETS:
        assert secret not in text
    for line in ORIGINAL:
        assert line.lower() not in text
    first_perturbed = text.splitlines()[0]
    assert first_perturbed in preview.lower()  # what the page showed is what was stored


@pytest.mark.parametrize("kind", ["jsonl", "csv"])
def test_structured_files_keep_their_other_fields(server, tmp_path, kind):
    from playwright.sync_api import sync_playwright

    key = server.tenant(f"tenant-{kind}")
    src = tmp_path / f"notes.{kind}"
    if kind == "jsonl":
        src.write_text(
            "\n".join(json.dumps({"text": t, "label": f"L{i}"}) for i, t in enumerate(ORIGINAL))
        )
    else:
        src.write_text(
            "text,label\n" + "\n".join(f'"{t}, really",L{i}' for i, t in enumerate(ORIGINAL))
        )
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page()
        page.goto(server.url + "/")
        page.fill("#api-key", key)
        page.click("#save-key")
        page.set_input_files("#file", str(src))
        page.click("#perturb")
        page.wait_for_selector("#perturb-status:has-text('done')", timeout=60_000)
        page.click("#upload")
        page.wait_for_selector("#upload-status:has-text('stored as')", timeout=60_000)
        browser.close()
    stored = next((server.data_dir / "tenants").rglob(f"ds_*.{kind}"))
    from privlm.data import load_file

    records = load_file(stored).records
    assert [r.label for r in records] == ["L0", "L1", "L2"]  # kept as they were
    text = " ".join(r.text for r in records).lower()
    for secret in SECRETS:
        assert secret not in text
