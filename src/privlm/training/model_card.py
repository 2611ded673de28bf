"""The model card (``README.md``) written beside every released adapter: what the privacy
statement in ``privacy.json`` means, in words a reader of the Hugging Face page can check.

A JFT adapter's card says selective DP (SDP) under its policy, and its ordinary DP figure
(none, unless phase 1 ran with light noise), never plain DP (issue 18 §2). A seeded run's
card carries the warning that its guarantee does not hold against anyone who knows the seed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def guarantee_line(privacy: Mapping[str, Any]) -> str:
    """One line: "(ε, δ)-DP per <unit>" or "(ε, δ)-SDP under policy '…'; DP: …"."""
    eps, delta = privacy.get("epsilon"), privacy.get("delta")
    if eps is None:
        return "no privacy guarantee (trained without noise)"
    pair = f"({eps:.4g}, {delta:.3g})"
    if privacy.get("guarantee_kind") == "SDP":
        dp = privacy.get("dp_epsilon")
        dp_text = "none" if dp is None else f"({dp:.4g}, {delta:.3g})-DP"
        return f"{pair}-SDP under the policy '{privacy.get('policy')}'; ordinary DP: {dp_text}"
    unit = privacy.get("unit_detail") or privacy.get("unit", "record")
    return f"{pair}-DP per {unit}"


def model_card(privacy: Mapping[str, Any]) -> str:
    """The card's Markdown, with Hugging Face front matter."""
    lines = [
        "---",
        "library_name: peft",
        f"base_model: {privacy.get('model', '')}",
        "tags: [privlm, differential-privacy]",
        "---",
        "",
        "# A privlm adapter",
        "",
        f"**Guarantee:** {guarantee_line(privacy)}.",
        "",
        f"- **Mechanism:** {privacy.get('mechanism', '')}",
        f"- **Accountant:** {privacy.get('accountant', '')}; σ = "
        f"{privacy.get('noise_multiplier')}, q = {privacy.get('sample_rate')}, "
        f"{privacy.get('steps')} steps, clipping norm {privacy.get('max_grad_norm')}",
        f"- **Privacy unit:** {privacy.get('unit', 'record')}; neighbouring datasets differ by "
        "adding or removing one unit",
        f"- **Data size:** {privacy.get('units')} units",
        f"- **Base model:** {privacy.get('model', '')}",
        f"- **Randomness:** {privacy.get('randomness', '')}",
    ]
    if privacy.get("warning"):
        lines.append(f"- **Warning:** {privacy['warning']}")
    if privacy.get("not_dp"):
        lines.append(f"- **Selective DP:** {privacy['not_dp']}")
    lines += [
        "",
        "## What the guarantee does not cover",
        "",
        "- the public base model and whatever it memorised before this fine-tuning;",
        "- data outside the training set, and facts shared by many units;",
        "- anyone who knows the seed, if the run was seeded.",
        "",
        "The full statement is in `privacy.json`.",
        "",
    ]
    return "\n".join(lines)
