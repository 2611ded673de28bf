"""A throwaway PostgreSQL cluster for one test module (Debian's server binaries; run as the
``postgres`` user when the tests run as root, since PostgreSQL refuses root)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import time
from pathlib import Path

from tests.service.live import free_port


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        raise RuntimeError("PostgreSQL server binaries not found (make test installs postgresql)")
    return found[-1]


class Postgres:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.data = root / "pgdata"
        self.port = free_port()
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            self.as_user = ["runuser", "-u", "postgres", "--"]

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def database(self, name: str) -> str:
        """The URL of a new, empty database ``name`` in the cluster: a test whose data
        directory (and so record key) is its own needs a database of its own too."""
        from sqlalchemy import create_engine, text

        engine = create_engine(self.url, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        engine.dispose()
        return self.url.rsplit("/", 1)[0] + f"/{name}"

    def start(self) -> Postgres:
        self.root.mkdir(parents=True, exist_ok=True)
        if self.as_user:
            shutil.chown(self.root, "postgres")
            os.chmod(self.root, 0o755)
        subprocess.run(
            [*self.as_user, _bin("initdb"), "-D", str(self.data), "-U", "postgres",
             "--auth=trust", "--no-sync", "-E", "UTF8"],
            check=True, capture_output=True,
        )  # fmt: skip
        subprocess.run(
            [*self.as_user, _bin("pg_ctl"), "-D", str(self.data), "-w", "-l",
             str(self.data / "log"), "-o", f"-p {self.port} -k {self.data} -h 127.0.0.1", "start"],
            check=True, capture_output=True,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            ok = subprocess.run(
                [_bin("pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)], capture_output=True
            )
            if ok.returncode == 0:
                return self
            time.sleep(0.2)
        raise RuntimeError("PostgreSQL did not start")

    def stop(self) -> None:
        subprocess.run(
            [*self.as_user, _bin("pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"],
            capture_output=True,
        )
