"""A real ``privlm serve`` process on loopback, for the browser, load and fault tests."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LiveServer:
    def __init__(
        self,
        data_dir: Path,
        worker: bool = True,
        model: str = "tiny",
        extra: tuple[str, ...] = (),
        db: str | None = None,
    ) -> None:
        self.data_dir, self.worker, self.model, self.extra = data_dir, worker, model, extra
        self.db = ("--db", db) if db else ()  # None: SQLite under data_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = data_dir / "server.log"

    def cli(self, *args: str) -> str:
        run = subprocess.run(
            [sys.executable, "-m", "privlm", *args, "--data-dir", str(self.data_dir), *self.db],
            capture_output=True, text=True, check=True, timeout=120,
        )  # fmt: skip
        return run.stdout

    def tenant(self, name: str) -> str:
        return str(json.loads(self.cli("service", "tenant-create", name, "--json"))["api_key"])

    def start(self) -> LiveServer:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable, "-m", "privlm", "serve", "--port", str(self.port),
            "--data-dir", str(self.data_dir), "--model", self.model, "--max-upload-mb", "2",
        ]  # fmt: skip
        if not self.worker:
            cmd.append("--no-worker")
        cmd += [*self.extra, *self.db]
        env = {**os.environ, "OMP_NUM_THREADS": "1"} if self.model == "tiny" else dict(os.environ)
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/v1/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise RuntimeError("server did not start")

    def kill(self) -> None:
        """SIGKILL, as a crash would: no cleanup runs."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def client(self, key: str, timeout: float = 120) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {key}"}, timeout=timeout
        )


def wait_for_job(c: httpx.Client, job_id: str, timeout: float = 300) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        j = c.get(f"/v1/jobs/{job_id}").json()
        if j["status"] in ("succeeded", "failed"):
            return j
        time.sleep(0.5)
    raise TimeoutError(f"job {job_id} still {j['status']}")


def deploy_ensemble(
    c: httpx.Client, text: str, job_params: dict, deployment: dict, timeout: float = 3600
) -> tuple[str, str, float]:
    """Upload ``text`` as a dataset, run an ensemble job on it with ``job_params`` and deploy
    the result with ``deployment`` (mechanism, ε, queries, ...): (deployment id, job id, the
    job's seconds)."""
    ds = c.post(
        "/v1/datasets", files={"file": ("data.txt", text.encode())},
        data={"budget_epsilon": "1000"},
    ).json()["id"]  # fmt: skip
    t = time.perf_counter()
    job = c.post(
        "/v1/jobs", json={"kind": "ensemble", "dataset_id": ds, "params": job_params}
    ).json()["id"]
    done = wait_for_job(c, job, timeout=timeout)
    assert done["status"] == "succeeded", done
    seconds = time.perf_counter() - t
    r = c.post("/v1/deployments", json={"job_id": job, **deployment})
    assert r.status_code == 201, r.text
    return str(r.json()["id"]), str(job), seconds
