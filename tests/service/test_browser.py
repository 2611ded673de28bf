"""The perturbation page in headless Chromium (Playwright, Debian's chromium): a file is
perturbed in the browser and only the perturbed text reaches the server (issue 6 §6)."""

from __future__ import annotations

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
