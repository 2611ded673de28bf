"""Fan ensemble training out over a Ray cluster: one task per adapter.

Each task fine-tunes one adapter on its part and writes it to the shared output directory;
the driver records each adapter in the manifest as soon as its task finishes, so an
interrupted distributed run resumes like a local one. The part's text travels to the
worker through Ray's object store, inside the cluster only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from privlm.errors import PrivlmError
from privlm.training.lora_finetune import LoraTrainingConfig


def _train_task(
    model_name: str, texts: list[str], cfg: dict[str, Any], out: str, name: str
) -> dict[str, Any]:
    from privlm.training.lora_finetune import LoraTrainingConfig, finetune_lora

    return finetune_lora(
        model_name, texts, LoraTrainingConfig(**cfg), Path(out), desc=name, progress=False
    )


def connect(address: str) -> Any:
    """Join the Ray cluster at ``address`` ('local' starts one in this process)."""
    from privlm.extras import require

    require("ray", "--ray")
    import ray

    if not ray.is_initialized():
        try:
            if address == "local":
                ray.init(include_dashboard=False, log_to_driver=False)
            else:
                ray.init(address=address, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise PrivlmError(f"could not join the Ray cluster at {address!r}: {exc}") from exc
    return ray


def train_on_ray(
    address: str,
    model_name: str,
    jobs: list[tuple[str, list[str], Path]],
    cfg: LoraTrainingConfig,
    cpus_per_task: float = 1.0,
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Submit one task per (name, texts, output dir); yield (name, stats) as each finishes."""
    ray = connect(address)
    remote: Callable[..., Any] = ray.remote(num_cpus=cpus_per_task)(_train_task).remote
    pending = {
        remote(model_name, texts, cfg.to_dict(), str(out), name): name for name, texts, out in jobs
    }
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        ref = done[0]
        yield pending.pop(ref), ray.get(ref)
