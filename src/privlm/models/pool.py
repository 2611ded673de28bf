"""One copy of each public model per process: the service's deployments of
the same model share its weights on the device, each attaching its own adapter stack
(``privlm.predict.engine``), instead of loading one copy each.

>>> pool = ModelPool()
>>> a = pool.get("tiny", device="cpu")
>>> a is pool.get("tiny", device="cpu")
True
>>> len(pool)
1
"""

from __future__ import annotations

import threading

from privlm.models.loading import LoadedModel, load_public_model
from privlm.models.placement import DeviceSpec, DtypeSpec, resolve_placement


class ModelPool:
    """Loaded public models keyed by (name, device, dtype), each loaded on first use. Only
    for inference: a model from the pool must never be trained or merged into."""

    def __init__(self) -> None:
        self._models: dict[tuple[str, str, str], LoadedModel] = {}
        self._lock = threading.Lock()

    def get(self, name: str, device: DeviceSpec = "auto", dtype: DtypeSpec = "auto") -> LoadedModel:
        place = resolve_placement(device, dtype)
        key = (name, str(place.device), str(place.dtype))
        with self._lock:
            if key not in self._models:
                self._models[key] = load_public_model(name, place.device, place.dtype)
            return self._models[key]

    def __len__(self) -> int:
        return len(self._models)
