"""How every request body is read: unknown fields refused, no coercion
("epsilon": true or "3" is an error, not 1.0 or 3.0), and no Infinity or NaN."""

from __future__ import annotations

from pydantic import ConfigDict

STRICT_BODY = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
# the OpenAI endpoints take other clients' fields too; ``openai_fields`` checks each of them
STRICT_OPENAI_BODY = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)

# the largest ε a dataset's budget may hold: beyond it no guarantee means anything
MAX_BUDGET_EPSILON = 1000.0
