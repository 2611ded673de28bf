"""Admission control for generation: how much the service takes on, and each
tenant's cap on completions in flight. Light to import (the CLI's ``serve`` options come
from :class:`SchedulerLimits`)."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from privlm.config import check_settings, setting


@dataclass(frozen=True)
class SchedulerLimits:
    """How much generation the service takes on; ``privlm serve`` exposes each field."""

    max_batch: int = setting(16, "completions decoded together per deployment", ge=1, le=256)
    max_queue: int = setting(
        64, "completions queued or running in the whole service, every tenant and deployment "
        "(then 503); keep it below the sum of the tenants' caps", ge=1, le=100_000,
    )  # fmt: skip
    tenant_max: int = setting(
        32, "completions a tenant may have queued or running, all deployments (then 429)",
        ge=1, le=10_000,
    )  # fmt: skip
    prefill_chunk: int = setting(
        256, "prompt tokens prefilled per step, between the batch's decoding steps",
        ge=16, le=65_536,
    )  # fmt: skip
    deadline_s: float = setting(
        120.0, "seconds a completion may take, waiting included, before it ends", gt=0, le=3600
    )

    def __post_init__(self) -> None:
        check_settings(self)


class Overloaded(Exception):
    """A completion that cannot be taken on now: answer ``status`` with ``Retry-After``."""

    def __init__(self, status: int, message: str, retry_after: int = 1) -> None:
        super().__init__(message)
        self.status, self.message, self.retry_after = status, message, retry_after


class TenantGate:
    """Completions in flight (queued or running), capped per tenant (429: the tenant's own
    load) and across the whole service (503: everyone's load). At the defaults (32 per
    tenant, 64 in all) two busy tenants fill the service and a third is turned away."""

    def __init__(self, cap: int, total_cap: int | None = None) -> None:
        self.cap, self.total_cap = cap, total_cap
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def enter(self, tenant: str) -> None:
        with self._lock:
            n = self._counts.get(tenant, 0)
            if n >= self.cap:
                raise Overloaded(
                    429, f"this API key's tenant already has {n} completions queued or running "
                    f"(the cap is {self.cap}); retry when one has finished",
                )  # fmt: skip
            total = sum(self._counts.values())
            if self.total_cap is not None and total >= self.total_cap:
                raise Overloaded(
                    503, f"the service has {total} completions queued or running (its bound "
                    f"is {self.total_cap}); retry shortly",
                )  # fmt: skip
            self._counts[tenant] = n + 1

    def leave(self, tenant: str) -> None:
        with self._lock:
            n = self._counts.get(tenant, 0) - 1
            if n > 0:
                self._counts[tenant] = n
            else:
                self._counts.pop(tenant, None)

    def in_flight(self, tenant: str) -> int:
        with self._lock:
            return self._counts.get(tenant, 0)
