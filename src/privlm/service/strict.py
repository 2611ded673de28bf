"""How every request body is read: unknown fields refused, no coercion
("epsilon": true or "3" is an error, not 1.0 or 3.0), and no Infinity or NaN."""

from __future__ import annotations

import json
from typing import Any

from pydantic import ConfigDict

from privlm.data.user_files import escaped_problem, json_depth

STRICT_BODY = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
# the OpenAI endpoints take other clients' fields too; ``openai_fields`` checks each of them
STRICT_OPENAI_BODY = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)

# the largest ε a dataset's budget may hold: beyond it no guarantee means anything
MAX_BUDGET_EPSILON = 1000.0

FORM_JSON_DEPTH = 8  # nesting of a JSON form field (the upload's ``perturbation``)


def form_object(value: str | None, field: str) -> dict[str, Any] | None:
    """A JSON form field read as strictly as a body: an object, at most
    :data:`FORM_JSON_DEPTH` deep (measured before parsing, so depth cannot exhaust the
    parser's stack), numbers finite, no escaped NUL or lone surrogate. Raises
    :class:`FormError` naming the field, never quoting it."""
    if value is None or value == "":
        return None
    if json_depth(value) > FORM_JSON_DEPTH:
        raise FormError(f"{field}: JSON nested deeper than {FORM_JSON_DEPTH} levels")
    try:
        parsed = json.loads(value, parse_constant=_no_constant)
    except (json.JSONDecodeError, ValueError):
        raise FormError(f"{field} must be JSON (numbers finite)") from None
    if not isinstance(parsed, dict):
        raise FormError(f"{field} must be a JSON object, got {type(parsed).__name__}")
    problem = escaped_problem(parsed)
    if problem:
        raise FormError(f"{field}: {problem}")
    return parsed


class FormError(ValueError):
    """A form field that is refused; the message is safe to return."""


def _no_constant(name: str) -> Any:
    raise ValueError(name)
