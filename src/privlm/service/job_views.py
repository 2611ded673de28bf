"""How a job is shown and handed out: its description (status, progress, what its output
guarantees) and its artefact as a zip that reveals no server path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from privlm.service.db import Job, now
from privlm.service.job_kinds import guarantee, public_params

TEXT_SUFFIXES = (".json", ".md", ".txt", ".yaml", ".yml")


def server_roots(data_dir: Path) -> list[str]:
    """Server directories an artefact must not reveal: the data directory, the model cache
    and the home directory (longest first, so the most specific is replaced)."""
    from privlm.settings import cache_dir

    roots = {str(data_dir.resolve()), str(data_dir), str(cache_dir()), str(Path.home())}
    return sorted((r for r in roots if len(r) > 1), key=len, reverse=True)


def scrub(text: str, roots: list[str]) -> str:
    """``text`` with every server directory replaced by ``<server>``.

    >>> scrub("base_model: /srv/privlm/cache/models/tiny", ["/srv/privlm/cache", "/srv"])
    'base_model: <server>/models/tiny'
    """
    for root in roots:
        text = text.replace(root, "<server>")
    return text


def zip_artifact(out_dir: Path, model: str, data_dir: Path) -> bytes:
    """The output directory as a zip (adapter or student prompt, and privacy statement),
    revealing no server path: PEFT writes the base model's local directory
    into ``adapter_config.json`` and its model card; they name ``model`` instead."""
    import io
    import zipfile

    roots = server_roots(data_dir)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for f in sorted(out_dir.rglob("*")):
            if not f.is_file():
                continue
            name = f.relative_to(out_dir).as_posix()
            if f.name == "adapter_config.json":
                config = json.loads(f.read_text())
                config["base_model_name_or_path"] = model
                z.writestr(name, scrub(json.dumps(config, indent=2), roots))
            elif f.suffix in TEXT_SUFFIXES:
                z.writestr(name, scrub(f.read_text(errors="replace"), roots))
            else:
                z.write(f, name)
    return buf.getvalue()


def progress(job: Job) -> dict[str, Any]:
    """Steps done of total, time elapsed, and (while running) an estimate of the time left
    from the pace so far."""
    elapsed = None
    if job.started_at is not None:
        elapsed = ((job.finished_at or now()) - job.started_at).total_seconds()
    eta = None
    if job.status == "running" and elapsed is not None and 0 < job.percent < 100:
        eta = elapsed * (100.0 - job.percent) / job.percent
    return {
        "percent": round(job.percent, 2), "stage": job.stage,
        "steps_done": job.steps_done, "steps_total": job.steps_total,
        "elapsed_s": None if elapsed is None else round(elapsed, 1),
        "eta_s": None if eta is None else round(eta, 1),
    }  # fmt: skip


def describe(job: Job, queue_position: int | None = None) -> dict[str, Any]:
    """A job as the API shows it; a queued job's place in line (1: next) when given
    (:mod:`privlm.service.job_queue`)."""
    return {
        "id": job.id,
        "kind": job.kind,
        "dataset_id": job.dataset_id,
        "params": public_params(job),
        "status": job.status,
        "queue_position": queue_position if job.status == "queued" else None,
        "stage": job.stage,
        "progress": progress(job),
        "cancel_requested": bool(job.cancel_requested),
        "epsilon": {
            "planned": job.epsilon_planned,
            "spent": job.epsilon_spent,
            "spent_means": "what this job charged to its dataset's budget (the dataset's "
            "running total is shown on the dataset)",
        },
        "guarantee": guarantee(job),
        "error": job.error,
        "attempts": job.attempts,
        "events": json.loads(job.events),
        "created_at": job.created_at.isoformat() + "Z",
        "started_at": None if job.started_at is None else job.started_at.isoformat() + "Z",
        "finished_at": None if job.finished_at is None else job.finished_at.isoformat() + "Z",
    }
