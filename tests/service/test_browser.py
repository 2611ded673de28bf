"""The perturbation page in headless Chromium (Playwright, Debian's chromium): a file is
perturbed in the browser and only the perturbed text reaches the server."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

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


def capture_bodies_script() -> str:
    """JavaScript that records every request body the page sends, FormData blobs included
    (a file as "[file <its name>] <its text>"), as text, in window.sentBodies."""
    return (
        "window.sentBodies = [];"
        "const f = window.fetch.bind(window);"
        "window.fetch = async (url, opts) => {"
        "  const b = opts && opts.body;"
        "  if (b instanceof FormData) {"
        "    for (const [k, v] of b.entries())"
        "      window.sentBodies.push(k + '=' + (v instanceof File ? '[file ' + v.name + '] ' : '')"
        "                             + (v instanceof Blob ? await v.text() : v));"
        "  } else if (b) { window.sentBodies.push(String(b)); }"
        "  return f(url, opts);"
        "};"
    )


def perturb_in_page(page, url: str, key: str, src) -> None:
    """Open the page, use the key, and perturb ``src`` with the default mechanism."""
    page.goto(url + "/")
    page.fill("#api-key", key)
    page.click("#save-key")
    page.set_input_files("#file", str(src))
    page.click("#perturb")
    page.wait_for_selector("#perturb-status:has-text('done')", timeout=60_000)


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
            + capture_bodies_script()
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
        perturb_in_page(page, server.url, key, src)
        page.select_option("#label-column", "label")  # a label leaves only when chosen
        page.wait_for_selector("#preview-table th:has-text('label (uploaded)')")
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


PEOPLE = [  # (user_id, customer, email): none of these may leave the page in clear
    ("cust-88123", "Aurelia Quenneville", "aurelia.q@example.org"),
    ("cust-88123", "Aurelia Quenneville", "aurelia.q@example.org"),
    ("cust-40917", "Bartholomew Ingersoll", "b.ingersoll@example.net"),
]


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_other_columns_never_leave_and_user_ids_leave_only_as_pseudonyms(server, tmp_path, kind):
    """Only the perturbed text, a chosen label and a keyed pseudonym of a chosen
    user id are uploaded; every other column is dropped; the server stores nothing else."""
    from playwright.sync_api import sync_playwright

    key = server.tenant(f"columns-{kind}")
    src = tmp_path / f"tickets.{kind}"
    rows = [
        {"text": t, "label": f"L{i % 2}", "user_id": u, "customer": c, "email": e}
        for i, (t, (u, c, e)) in enumerate(zip(ORIGINAL, PEOPLE, strict=True))
    ]
    if kind == "jsonl":
        src.write_text("\n".join(json.dumps(r) for r in rows))
    else:
        src.write_text(
            "text,label,user_id,customer,email\n"
            + "\n".join(",".join(f'"{v}"' for v in r.values()) for r in rows)
        )
    requests: list[bytes] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page()
        page.on("request", lambda req: requests.append(req.post_data_buffer or b""))
        page.add_init_script(capture_bodies_script())
        perturb_in_page(page, server.url, key, src)
        leaves = page.inner_text("#leaves")
        assert "Dropped, never uploaded: label, user_id, customer, email" in leaves
        page.select_option("#label-column", "label")
        page.select_option("#user-column", "user_id")
        page.wait_for_selector("#preview-table th:has-text('user pseudonym (uploaded)')")
        leaves = page.inner_text("#leaves")
        assert "Dropped, never uploaded: customer, email" in leaves
        assert "keyed pseudonym of 'user_id'" in leaves
        preview = page.inner_text("#preview-table")
        page.click("#upload")
        page.wait_for_selector("#upload-status:has-text('stored as')", timeout=60_000)
        sent = [b.encode() for b in page.evaluate("window.sentBodies")]
        browser.close()
    everything = (b"".join(requests) + b"".join(sent)).lower()
    assert any(b.startswith(b"file=") for b in sent)  # the upload itself was seen
    for _, customer, email in PEOPLE:
        for value in (customer, email, customer.split()[1], email.split("@")[0]):
            assert value.lower().encode() not in everything, value
    for user, _, _ in PEOPLE:
        assert user.encode() not in everything and b"88123" not in everything
    for secret in SECRETS:
        assert secret.encode() not in everything, secret

    from privlm.data import load_file

    stored = max(
        (server.data_dir / "tenants").rglob(f"ds_*.{kind}"), key=lambda f: f.stat().st_mtime
    )
    ds = load_file(stored)
    assert ds.unit_kind == "user"
    assert all(r.fields == {} for r in ds.records)  # nothing but text, label and user_id
    units = [r.unit for r in ds.records]
    assert units[0] == units[1] != units[2]  # one customer, one pseudonym, within the upload
    assert all(len(u) == len("user-u") + 32 for u in units)
    assert [r.label for r in ds.records] == ["L0", "L1", "L0"]
    assert units[0].removeprefix("user-") in preview  # the preview showed what was sent


def test_the_server_refuses_columns_no_job_uses(server):
    import urllib.request

    key = server.tenant("columns-direct")
    body = json.dumps({"text": "a note", "email": "someone@example.org"}).encode()
    boundary = "privlmtestboundary"
    form = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="x.jsonl"\r\n'
            "Content-Type: text/plain\r\n\r\n"
        ).encode()
        + body
        + f"\r\n--{boundary}--\r\n".encode()
    )
    req = urllib.request.Request(
        server.url + "/v1/datasets", data=form, method="POST",
        headers={"Authorization": f"Bearer {key}", "Content-Type": f"multipart/form-data; boundary={boundary}"},
    )  # fmt: skip
    with pytest.raises(urllib.request.HTTPError) as err:
        urllib.request.urlopen(req)
    assert err.value.code == 400
    message = err.value.read().decode()
    assert "'email'" in message and "used by no job" in message
    assert "someone@example.org" not in message


# the page does the whole job ------------------------------------------------

SHOTS = Path(__file__).resolve().parents[2] / "build" / "test-output" / "screenshots"
NOTES = "\n".join(
    f"patient {i} was seen on monday and feels {'better' if i % 2 else 'worse'} today"
    for i in range(24)
)


def shot(page, name: str) -> None:
    """A full-page screenshot in the test output (build/, never the repository)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


@pytest.fixture(scope="module")
def working_server(tmp_path_factory):
    srv = LiveServer(tmp_path_factory.mktemp("browser-flow")).start()  # with its job worker
    yield srv
    srv.stop()


def launch(p):
    if not shutil.which(CHROMIUM):
        pytest.fail("Debian's chromium is needed (make test installs it)")
    return p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)


def test_feedback_wrong_key_empty_budget_one_upload_and_warnings(server, tmp_path):
    from playwright.sync_api import sync_playwright

    key = server.tenant("feedback-tenant")
    src = tmp_path / "notes.txt"
    src.write_text(NOTES + "\n")
    with sync_playwright() as p:
        browser = launch(p)
        page = browser.new_page()
        page.goto(server.url + "/")
        page.fill("#api-key", "plk_not-a-real-key")
        page.click("#save-key")
        page.wait_for_selector("#key-status:has-text('not valid')")
        shot(page, "wrong-key")
        page.fill("#api-key", key)
        page.click("#save-key")
        page.wait_for_selector("#key-status:has-text('key accepted')")
        page.set_input_files("#file", str(src))
        # the default ε reads (three words in four come through) and warns of nothing
        page.wait_for_selector("#eps-tradeoff:has-text('come through')")
        assert page.input_value("#epsilon") == "150"
        assert "83 %" in page.inner_text("#eps-tradeoff")
        seen = {}
        for eps in ("", "20", "300"):  # "": the default
            if eps:
                page.fill("#epsilon", eps)
            page.click("#perturb")
            page.wait_for_selector("#perturb-status:has-text('done')", timeout=60_000)
            seen[eps] = page.inner_text("#warnings")
            page.evaluate("document.getElementById('perturb-status').textContent = ''")
        assert seen[""].strip() == "", seen[""]
        assert "train a model poorly" in seen["20"]
        assert "names included" in seen["300"] and "hides next to nothing" in seen["300"]
        page.fill("#epsilon", "150")
        page.select_option("#mechanism", "gaussian")  # a default follows the mechanism
        assert page.input_value("#epsilon") == "300"
        page.select_option("#mechanism", "laplace")
        assert page.input_value("#epsilon") == "150"
        page.fill("#epsilon", "42")
        page.select_option("#mechanism", "gaussian")  # a value the user typed stays
        assert page.input_value("#epsilon") == "42"
        page.select_option("#mechanism", "laplace")
        page.fill("#budget-epsilon", "-2")
        page.click("#upload")
        page.wait_for_selector("#upload-status:has-text('must be a number above 0')")
        page.fill("#budget-epsilon", "")  # empty: the server's default, said in the answer
        page.click("#upload")
        page.wait_for_selector("#upload-status:has-text('stored as')", timeout=60_000)
        shot(page, "empty-budget")
        assert "no budget ε was given: the default, ε 8" in page.inner_text("#upload-status")
        assert page.is_disabled("#upload")
        page.click("#upload", force=True)  # a second click sends nothing
        page.wait_for_selector("#datasets tbody tr")
        shot(page, "uploaded-once")
        rows = page.inner_text("#datasets tbody")
        browser.close()
    with server.client(key) as c:
        mine = c.get("/v1/datasets").json()["data"]
    assert len(mine) == 1 and mine[0]["budget"]["epsilon"] == 8.0  # one upload, one dataset
    assert mine[0]["id"] in rows


def test_public_data_is_declared_by_its_checkbox_and_no_file_name_leaves(server, tmp_path):
    """The file's own name (here a patient's) never leaves the page: only the dataset name
    typed in; ticking "Public data" stores a public dataset (no budget), shown as such and
    never offered to a private job."""
    from playwright.sync_api import sync_playwright

    key = server.tenant("public-tenant")
    src = tmp_path / "wobblethorpe-admission-notes.txt"
    src.write_text(NOTES + "\n")
    bodies: list[bytes] = []
    with sync_playwright() as p:
        browser = launch(p)
        page = browser.new_page()
        page.on("request", lambda req: bodies.append(req.post_data_buffer or b""))
        page.add_init_script(capture_bodies_script())
        perturb_in_page(page, server.url, key, src)
        page.fill("#ds-name", "forum posts")
        page.check("#public-data")
        page.click("#upload")
        page.wait_for_selector("#upload-status:has-text('stored as')", timeout=60_000)
        bodies += [b.encode() for b in page.evaluate("window.sentBodies")]
        page.wait_for_selector("#datasets tbody tr")
        rows = page.inner_text("#datasets tbody")
        offered = page.inner_text("#job-dataset")
        browser.close()
    sent = b"".join(bodies)
    assert b"file=[file upload.txt] " in sent and b"name=forum posts" in sent
    assert b"public=true" in sent
    # "admission" alone may be a perturbed word (the page draws from GloVe's vocabulary);
    # the made-up town and the file's name as a whole are not
    assert b"wobblethorpe" not in sent.lower() and b"admission-notes" not in sent.lower()
    with server.client(key) as c:
        (ds,) = c.get("/v1/datasets").json()["data"]
    assert ds["kind"] == "public" and ds["budget"] is None and ds["name"] == "forum posts"
    assert "public: no budget" in rows and ds["id"] in rows
    assert ds["id"] not in offered  # no private job trains on public data


def test_a_newcomer_goes_from_the_page_to_a_private_completion(working_server, tmp_path):
    """Perturb and upload, train an ensemble, deploy it with PMixED, complete a prompt in the
    playground and watch the budget fall; then cancel a job and download an artefact."""
    from playwright.sync_api import sync_playwright

    srv = working_server
    key = srv.tenant("newcomer")
    src = tmp_path / "notes.txt"
    src.write_text(NOTES + "\n")
    with sync_playwright() as p:
        browser = launch(p)
        page = browser.new_page(accept_downloads=True)
        page.goto(srv.url + "/")
        page.fill("#api-key", key)
        page.click("#save-key")
        page.wait_for_selector("#key-status:has-text('key accepted')")
        page.set_input_files("#file", str(src))
        page.click("#perturb")
        page.wait_for_selector("#perturb-status:has-text('done')", timeout=60_000)
        page.fill("#budget-epsilon", "50")
        page.click("#upload")
        page.wait_for_selector("#upload-status:has-text('stored as')", timeout=60_000)
        page.wait_for_selector("#job-dataset option", state="attached")
        page.select_option("#job-kind", "ensemble")
        page.fill("#job-parts", "2")
        page.click("#submit-job")
        page.wait_for_selector("#job-status:has-text('queued')")
        page.wait_for_selector("#jobs tbody td:has-text('succeeded')", timeout=240_000)
        shot(page, "ensemble-trained")
        page.wait_for_selector("#dep-job option", state="attached")
        page.fill("#dep-field-epsilon", "8")
        page.fill("#dep-field-queries", "64")
        page.click("#deploy")
        page.wait_for_selector("#deploy-status:has-text('deployed')", timeout=60_000)
        page.wait_for_selector("#play-deployment option", state="attached")
        page.fill("#play-tokens", "4")
        page.click("#play")
        page.wait_for_selector("#play-budget:has-text('After')", timeout=120_000)
        shot(page, "playground")
        budget = page.inner_text("#play-budget")
        output = page.inner_text("#play-output")
        page.evaluate("document.getElementById('play-budget').textContent = ''")
        page.click("#play")  # again: tokens spent before and after, explained once
        page.wait_for_selector("#play-budget:has-text('After')", timeout=120_000)
        assert page.inner_text("#play-budget").count("grows fast") == 1
        # cancel a long job from the page, and download a finished DP artefact
        with srv.client(key) as c:
            ds = c.get("/v1/datasets").json()["data"][0]["id"]
            r = c.post("/v1/jobs", json={"kind": "dpsgd", "dataset_id": ds,
                       "params": {"epsilon": 1, "epochs": 100, "block_size": 16}})  # fmt: skip
            assert r.status_code == 201, r.text
            long = r.json()
        page.wait_for_selector(f"#job-{long['id']} button:has-text('Cancel')", timeout=30_000)
        page.click(f"#job-{long['id']} button:has-text('Cancel')")
        page.wait_for_selector(f"#job-{long['id']} td:has-text('cancelled')", timeout=120_000)
        shot(page, "cancelled")
        with srv.client(key) as c:
            r = c.post("/v1/jobs", json={"kind": "dpsgd", "dataset_id": ds,
                       "params": {"epsilon": 1, "block_size": 16}})  # fmt: skip
            assert r.status_code == 201, r.text
            quick = r.json()
        page.wait_for_selector(f"#job-{quick['id']} button:has-text('Download')", timeout=240_000)
        with page.expect_download() as info:
            page.click(f"#job-{quick['id']} button:has-text('Download')")
        assert info.value.suggested_filename == f"{quick['id']}.zip"
        browser.close()
    assert output.startswith("The patient was")
    left = [int(n) for n in re.findall(r"(\d+) of 64 private tokens left", budget)]
    assert len(left) == 2 and left[0] == 64 and left[1] < 64  # it fell with each token


def wait_for_jobs(client, ids, timeout=300.0):
    """Every job in ``ids`` succeeded (or fail the test with the one that did not)."""
    import time

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        jobs = {j["id"]: j for j in client.get("/v1/jobs").json()["data"]}
        bad = [jobs[i] for i in ids if jobs[i]["status"] in ("failed", "cancelled")]
        assert not bad, bad
        if all(jobs[i]["status"] == "succeeded" for i in ids):
            return jobs
        time.sleep(1)
    raise AssertionError(f"jobs {ids} did not finish in {timeout} s")


def test_a_user_with_history_acts_on_what_they_just_made(working_server, tmp_path):
    """A tenant with two datasets, two finished jobs and two deployments walks the page: the
    job trains on the dataset just uploaded, the deploy serves the job just trained (with the
    queries typed in), and the playground queries the deployment just made."""
    from playwright.sync_api import sync_playwright

    srv = working_server
    key = srv.tenant("with-history")
    with srv.client(key) as c:
        old = []
        for i in range(2):
            files = {
                "file": (f"old{i}.txt", f"{NOTES}\nan older note {i}\n".encode(), "text/plain")
            }
            r = c.post(
                "/v1/datasets", files=files, data={"name": f"old-{i}", "budget_epsilon": "50"}
            )
            assert r.status_code == 201, r.text
            old.append(r.json()["id"])
        ens = c.post("/v1/jobs", json={"kind": "ensemble", "dataset_id": old[0],
                                       "params": {"parts": 2, "block_size": 16}}).json()  # fmt: skip
        dp = c.post("/v1/jobs", json={"kind": "dpsgd", "dataset_id": old[1],
                                      "params": {"epsilon": 1, "block_size": 16}}).json()  # fmt: skip
        wait_for_jobs(c, [ens["id"], dp["id"]])
        old_deps = [
            c.post("/v1/deployments", json={"job_id": ens["id"], "mechanism": "pmixed",
                                            "epsilon": 8, "queries": 32}).json()["id"],
            c.post("/v1/deployments", json={"job_id": dp["id"], "mechanism": "adapter"}).json()["id"],
        ]  # fmt: skip
    src = tmp_path / "tickets-nov.txt"
    src.write_text(NOTES + "\n")
    with sync_playwright() as p:
        browser = launch(p)
        page = browser.new_page()
        perturb_in_page(page, srv.url, key, src)
        page.fill("#ds-name", "tickets-nov")
        page.click("#upload")
        page.wait_for_selector("#upload-status:has-text('stored as')", timeout=60_000)
        new_ds = page.inner_text("#upload-status").split("stored as ")[1].split(" ")[0]
        page.wait_for_function(f"document.getElementById('job-dataset').value === '{new_ds}'")
        page.select_option("#job-kind", "ensemble")
        page.fill("#job-parts", "2")
        assert "trains on tickets-nov" in page.inner_text("#job-target")
        page.click("#submit-job")
        page.wait_for_selector("#job-status:has-text('queued')")
        new_job = page.inner_text("#job-status").split("queued ")[1].strip()
        page.wait_for_function(f"document.getElementById('dep-job').value === '{new_job}'")
        page.wait_for_selector("#deploy:not([disabled])", timeout=240_000)  # it succeeded
        assert page.is_visible("#dep-field-queries") and page.is_visible("#dep-field-epsilon")
        offered = page.eval_on_selector_all("#dep-mechanism option", "os => os.map(o => o.value)")
        assert offered == ["pmixed", "screened"]  # what serves a PMixED ensemble (the registry)
        page.select_option("#dep-job", dp["id"])  # an adapter takes neither ε nor queries
        assert page.locator("#dep-field-epsilon").count() == 0
        assert page.locator("#dep-field-queries").count() == 0
        assert "costs nothing more" in page.inner_text("#dep-target")
        page.select_option("#dep-job", new_job)
        page.fill("#dep-field-epsilon", "8")
        page.fill("#dep-field-queries", "64")
        assert f"serves job {new_job} with pmixed" in page.inner_text("#dep-target")
        page.click("#deploy")
        page.wait_for_selector("#deploy-status:has-text('deployed')", timeout=60_000)
        new_dep = page.inner_text("#deploy-status").split("deployed ")[1].strip()
        page.wait_for_function(f"document.getElementById('play-deployment').value === '{new_dep}'")
        page.fill("#play-tokens", "3")
        page.click("#play")
        page.wait_for_selector("#play-budget:has-text('After')", timeout=120_000)
        shot(page, "with-history")
        browser.close()
    with srv.client(key) as c:
        jobs = {j["id"]: j for j in c.get("/v1/jobs").json()["data"]}
        assert jobs[new_job]["dataset_id"] == new_ds and new_ds not in old
        deps = {d["id"]: d for d in c.get("/v1/deployments").json()["data"]}
        assert deps[new_dep]["job_id"] == new_job and deps[new_dep]["params"]["queries"] == 64
        spent = c.get(f"/v1/deployments/{new_dep}/budget").json()["queries"]
        assert spent["left"] < 64  # the playground queried the new deployment
        untouched = c.get(f"/v1/deployments/{old_deps[0]}/budget").json()["queries"]
        assert untouched["left"] == untouched["total"] == 32  # and not the older one


def test_deploy_clicked_early_waits_for_the_job_just_started(working_server, tmp_path):
    """Right after "Start job", the deploy form offered the newest *finished* job (another
    dataset's ensemble), and Deploy reserved ε on it. Now the form selects the job just
    started, says it is waiting for it, and deploys nothing else; once it has succeeded,
    Deploy serves it. A button on an older job asks first."""
    from playwright.sync_api import sync_playwright

    srv = working_server
    key = srv.tenant("early-deploy")
    with srv.client(key) as c:
        files = {"file": ("old.txt", f"{NOTES}\nan older note\n".encode(), "text/plain")}
        old_ds = c.post("/v1/datasets", files=files, data={"budget_epsilon": "50"}).json()["id"]
        old = c.post("/v1/jobs", json={"kind": "ensemble", "dataset_id": old_ds,
                                       "params": {"parts": 2, "block_size": 16}}).json()  # fmt: skip
        wait_for_jobs(c, [old["id"]])
    src = tmp_path / "fresh.txt"
    src.write_text("\n".join(f"a fresh ticket number {i} about the scanner" for i in range(30)))
    dialogs: list[str] = []
    with sync_playwright() as p:
        browser = launch(p)
        page = browser.new_page()
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        perturb_in_page(page, srv.url, key, src)
        page.fill("#budget-epsilon", "50")
        page.click("#upload")
        page.wait_for_selector("#upload-status:has-text('stored as')", timeout=60_000)
        new_ds = page.inner_text("#upload-status").split("stored as ")[1].split(" ")[0]
        page.wait_for_function(f"document.getElementById('job-dataset').value === '{new_ds}'")
        page.select_option("#job-kind", "ensemble")
        page.fill("#job-parts", "2")
        page.click("#submit-job")
        page.wait_for_selector("#job-status:has-text('queued')")
        new_job = page.inner_text("#job-status").split("queued ")[1].strip()
        page.wait_for_function(f"document.getElementById('dep-job').value === '{new_job}'")
        assert f"waiting for job {new_job}" in page.inner_text("#dep-target")
        assert page.is_disabled("#deploy")
        page.click("#deploy", force=True)  # clicked early: nothing is deployed
        shot(page, "deploy-waiting")
        with srv.client(key) as c:
            assert c.get("/v1/deployments").json()["data"] == []
        page.wait_for_selector("#deploy:not([disabled])", timeout=240_000)
        assert f"serves job {new_job} with pmixed" in page.inner_text("#dep-target")
        page.fill("#dep-field-epsilon", "8")
        page.fill("#dep-field-queries", "16")
        page.click("#deploy")
        page.wait_for_selector("#deploy-status:has-text('deployed')", timeout=60_000)
        page.select_option("#dep-job", old["id"])  # an older job: the page asks first
        page.click("#deploy")
        browser.close()
    assert any(old["id"] in d for d in dialogs)  # asked, and dismissed: nothing deployed
    with srv.client(key) as c:
        deps = c.get("/v1/deployments").json()["data"]
    assert [d["job_id"] for d in deps] == [new_job]


def test_the_owner_reads_a_synth_jobs_report_on_the_page(working_server, tmp_path):
    """The jobs table's "Curator report" shows the overlap summary, labelled not DP (the
    download's files are checked in tests/service/test_synth_job.py)."""
    from playwright.sync_api import sync_playwright

    srv = working_server
    key = srv.tenant("synth-owner")
    with srv.client(key) as c:
        files = {"file": ("notes.txt", f"{NOTES}\n".encode(), "text/plain")}
        r = c.post("/v1/datasets", files=files, data={"name": "notes", "budget_epsilon": "10"})
        assert r.status_code == 201, r.text
        job = c.post("/v1/jobs", json={"kind": "synth", "dataset_id": r.json()["id"],
                                       "params": {"epsilon": 2, "count": 2, "max_tokens": 3,
                                                  "members": 2, "prompt_tokens": 16}}).json()  # fmt: skip
        wait_for_jobs(c, [job["id"]])
    with sync_playwright() as p:
        browser = launch(p)
        page = browser.new_page()
        page.goto(srv.url + "/")
        page.fill("#api-key", key)
        page.click("#save-key")
        row = page.locator(f"#job-{job['id']}")
        row.locator("button:has-text('Curator report')").click(timeout=30_000)
        page.wait_for_selector("#job-status:has-text('Not DP, for you only')", timeout=30_000)
        assert "words in a row with a record" in page.inner_text("#job-status")
        browser.close()


def test_the_page_offers_the_synth_generator_and_sends_it(working_server):
    """Choosing "DP synthetic texts" shows the generator; the job is submitted with it."""
    from playwright.sync_api import sync_playwright

    srv = working_server
    key = srv.tenant("synth-generator")
    with srv.client(key) as c:
        files = {"file": ("notes.txt", f"{NOTES}\n".encode(), "text/plain")}
        r = c.post("/v1/datasets", files=files, data={"name": "notes", "budget_epsilon": "10"})
        assert r.status_code == 201, r.text
    with sync_playwright() as p:
        browser = launch(p)
        page = browser.new_page()
        page.goto(srv.url + "/")
        page.fill("#api-key", key)
        page.click("#save-key")
        page.wait_for_selector("#job-dataset option", state="attached")
        assert page.is_hidden("#job-generator-label")
        page.select_option("#job-kind", "synth")
        assert page.is_visible("#job-generator-label")
        page.select_option("#job-generator", "dp-lora")
        assert page.is_visible("#job-scrub-label")
        page.select_option("#job-scrub", "regex")
        page.fill("#job-epsilon", "2")
        page.fill("#job-count", "2")
        with page.expect_request(
            lambda q: q.url.endswith("/v1/jobs") and q.method == "POST"
        ) as sent:
            page.click("#submit-job")
        body = json.loads(sent.value.post_data or "{}")
        assert body["kind"] == "synth" and body["params"]["generator"] == "dp-lora"
        assert body["params"]["scrub"] == "regex"
        page.wait_for_selector("#job-status:has-text('queued')")
        browser.close()
