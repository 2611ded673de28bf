"""What privlm does with each OpenAI request field: nothing a client sends is ignored.

A field that would change which token is released, or release more than one sample of the
private distribution, is refused with the reason. A field with no effect on what is released
(``user``, ``metadata``) is accepted. Any other field is refused by name, so a client never
believes a setting took effect when it did not.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from privlm.service.api_errors import invalid

RESHAPES = "reshapes the private distribution after its cost was computed"
REFUSED = {
    "temperature": f"a temperature {RESHAPES}; it must be 1",
    "top_p": f"nucleus (top-p) truncation {RESHAPES}; it must be 1",
    "logprobs": "log-probabilities would release the private distribution itself, far more "
    "than the one sample that was charged",
    "top_logprobs": "log-probabilities would release the private distribution itself, far "
    "more than the one sample that was charged",
    "logit_bias": f"a logit bias {RESHAPES}",
    "presence_penalty": f"a presence penalty {RESHAPES}; it must be 0",
    "frequency_penalty": f"a frequency penalty {RESHAPES}; it must be 0",
    "seed": "private sampling draws from the operating system's CSPRNG; a seed would let "
    "anyone who knows it predict the sampling noise",
    "best_of": "best_of picks among several samples by their probability",
    "echo": "echoing the prompt is not supported",
    "suffix": "insertion (suffix) is not supported",
    "tools": "tools constrain decoding as a function of the private distribution",
    "tool_choice": "tools constrain decoding as a function of the private distribution",
    "functions": "functions constrain decoding as a function of the private distribution",
    "function_call": "functions constrain decoding as a function of the private distribution",
    "parallel_tool_calls": "tools constrain decoding as a function of the private distribution",
    "response_format": "structured output constrains decoding as a function of the private "
    "distribution",
}
NEUTRAL: dict[str, tuple[Any, ...]] = {
    "temperature": (None, 1, 1.0),
    "top_p": (None, 1, 1.0),
    "logprobs": (None, False, 0),
    "presence_penalty": (None, 0, 0.0),
    "frequency_penalty": (None, 0, 0.0),
    "echo": (None, False),
    "best_of": (None, 1),
    "suffix": (None, ""),
    "tools": (None, []),
    "functions": (None, []),
    "parallel_tool_calls": (None, False, True),
}
NO_EFFECT = {"user", "metadata", "store"}


def check_fields(req: BaseModel, chat: bool) -> None:
    """Refuse ``n`` ≠ 1 and every extra field that is not neutral, naming it and why."""
    n = getattr(req, "n", 1)
    if n != 1:
        raise invalid("n must be 1: each further sample would be a further private release")
    for name, value in (req.model_extra or {}).items():
        if name in NO_EFFECT:
            continue
        if name in REFUSED:
            if value in NEUTRAL.get(name, (None,)):
                continue
            raise invalid(f"refused {name}: {REFUSED[name]}")
        endpoint = "chat completions" if chat else "completions"
        raise invalid(
            f"unsupported field {name!r} for {endpoint}: privlm refuses what it would otherwise "
            "ignore"
        )
