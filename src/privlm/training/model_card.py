"""The model card (``README.md``) written beside every released adapter: what the privacy
statement in ``privacy.json`` means, in words a reader of the Hugging Face page can check.

A JFT adapter's card says selective DP (SDP) under its policy, and its ordinary DP figure
(none, unless phase 1 ran with light noise), never plain DP. A seeded run's
card carries the warning that its guarantee does not hold against anyone who knows the seed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from privlm.accounting.statements import guarantee_text
from privlm.models.loading import base_model_id


def guarantee_line(privacy: Mapping[str, Any]) -> str:
    """One line: "(ε, δ)-DP per <unit>" or "(ε, δ)-SDP under policy '…'; DP: …"."""
    found, delta = privacy.get("epsilon"), float(privacy.get("delta") or 0.0)
    if found is None:
        return "no privacy guarantee (trained without noise)"
    eps = float(found)
    if privacy.get("guarantee_kind") == "SDP":
        dp = privacy.get("dp_epsilon")
        dp_text = "none" if dp is None else guarantee_text(dp, delta)
        sdp = guarantee_text(eps, delta, kind="SDP")
        return f"{sdp} under the policy '{privacy.get('policy')}'; ordinary DP: {dp_text}"
    unit = privacy.get("unit_detail") or privacy.get("unit", "record")
    return guarantee_text(eps, delta, unit)


def card_tags(privacy: Mapping[str, Any]) -> str:
    """The card's tags say what covers the artefact: DP, selective DP (JFT: no DP bound
    unless phase 1 ran with noise), or nothing."""
    if privacy.get("epsilon") is None:
        return "privlm, not-private"
    if privacy.get("guarantee_kind") == "SDP":
        dp = (
            "not-differentially-private"
            if privacy.get("dp_epsilon") is None
            else ("differential-privacy")
        )
        return f"privlm, selective-differential-privacy, {dp}"
    return "privlm, differential-privacy"


def front_matter(model: str, library: str | None, tags: str) -> list[str]:
    """Hugging Face front matter; ``base_model`` only where the model has a hub id."""
    hub = base_model_id(model) if model else ""
    return [
        "---",
        *([f"library_name: {library}"] if library else []),
        *([f"base_model: {hub}"] if "/" in hub and not hub.startswith("/") else []),
        f"tags: [{tags}]",
        "---",
        "",
    ]


def mechanism_lines(privacy: Mapping[str, Any]) -> list[str]:
    lines = [f"- **Mechanism:** {privacy.get('mechanism', '')}"]
    if privacy.get("noise_multiplier") is not None and privacy.get("sample_rate") is not None:
        lines.append(
            f"- **Accountant:** {privacy.get('accountant', '')}; σ = "
            f"{privacy.get('noise_multiplier')}, q = {privacy.get('sample_rate')}, "
            f"{privacy.get('steps')} steps, clipping norm {privacy.get('max_grad_norm')}"
        )
    elif privacy.get("accounting"):
        lines.append(f"- **Accountant:** {privacy['accounting']}")
    return lines


def model_card(
    privacy: Mapping[str, Any], title: str = "A privlm adapter", library: str | None = "peft"
) -> str:
    """The card's Markdown, with Hugging Face front matter."""
    model = str(privacy.get("model", ""))
    lines = [
        *front_matter(model, library, card_tags(privacy)),
        f"# {title}",
        "",
        f"**Guarantee:** {guarantee_line(privacy)}.",
        "",
        *mechanism_lines(privacy),
        f"- **Privacy unit:** {privacy.get('unit', 'record')}; neighbouring datasets differ by "
        "adding or removing one unit",
        f"- **Data size:** {privacy.get('units')} units (public by declaration: the sampling "
        "rate, the steps and the default δ are computed from it)",
        f"- **Base model:** {base_model_id(model) if model else ''}",
        f"- **Randomness:** {privacy.get('randomness', '')}",
    ]
    if privacy.get("warning"):
        lines.append(f"- **Warning:** {privacy['warning']}")
    if privacy.get("delta_warning"):
        lines.append(f"- **Weak δ:** {privacy['delta_warning']}")
    if privacy.get("not_dp"):
        lines.append(f"- **Selective DP:** {privacy['not_dp']}")
    if isinstance(privacy.get("detector"), dict):  # JFT's record (a DP run names it only)
        from privlm.detect.provenance import recall_line

        lines.append(f"- **Policy's detector:** {recall_line(privacy['detector'])}")
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


def ensemble_card(manifest: Mapping[str, Any], member: str | None = None) -> str:
    """The card of a PMixED or SubMix ensemble (or of one ``member`` adapter of it): it is
    not DP by itself, since each adapter saw its part of the data in the clear; only tokens
    mixed by a deployment are, at the deployment's (ε, δ)."""
    model = str(manifest.get("model", ""))
    in_context = manifest.get("member_kind") == "in-context"
    kind = "in-context members" if in_context else "LoRA adapters"
    what = (
        f"adapter {member} of a {manifest.get('protocol')} ensemble"
        if member
        else f"a {manifest.get('protocol')} ensemble of {len(manifest.get('partition', []))} {kind}"
    )
    made = (
        "Each member is the public model prompted with the records of one disjoint part of "
        "the private data, verbatim (member-prompts.json); never release them."
        if in_context
        else "Each adapter was fine-tuned without noise on one disjoint part of the private "
        "data; do not release it."
    )
    return "\n".join([
        *front_matter(model, "peft", "privlm, not-private, private-prediction-ensemble"),
        f"# privlm: {what}",
        "",
        f"**Guarantee:** none by itself. {made} Tokens generated through a "
        f"{str(manifest.get('protocol')).upper()} deployment are differentially private, at "
        "the (ε, δ) that deployment's ledger states.",
        "",
        f"- **Mechanism:** {manifest.get('protocol')} private prediction over the ensemble "
        "(parts by a keyed hash of each privacy unit, so one unit changes one part)",
        "- **Accountant:** the deployment's (PMixED: data-dependent RDP per token; SubMix: "
        "per-part RDP), charged before each token is released",
        f"- **Privacy unit:** {manifest.get('privacy_unit')}; neighbouring datasets differ by "
        "adding or removing one unit",
        f"- **Data size:** {manifest.get('units')} units in {manifest.get('n_parts')} parts",
        f"- **Base model:** {base_model_id(model) if model else ''}",
        "",
        "## What the guarantee does not cover",
        "",
        f"- the {'member prompts' if in_context else 'adapters'} themselves, which must stay "
        "private;",
        "- the public base model and whatever it memorised;",
        "- tokens generated without a deployment's ledger.",
        "",
    ])  # fmt: skip


def jft_phase1_card(model: str, policy: str, units: int) -> str:
    """The card of a JFT phase-1 adapter trained without noise (direct or screened mode): no
    guarantee at all, since what the policy missed was learnt in the clear (JFT §3); only the
    phase-2 adapter is released (every artefact says what it is)."""
    return "\n".join([
        *front_matter(model, "peft", "privlm, not-private"),
        "# privlm: phase 1 of Just Fine-tune Twice",
        "",
        "**Guarantee:** none. This adapter was fine-tuned without noise on data redacted by "
        f"the policy '{policy}': whatever the policy missed is in it unprotected. Do not "
        "release it; the release is the phase-2 adapter trained from it with DP-SGD.",
        "",
        "- **Mechanism:** LoRA fine-tuning on redacted data (each flagged span one masked "
        "slot, left out of the loss)",
        "- **Accountant:** none",
        f"- **Data size:** {units} units",
        f"- **Base model:** {base_model_id(model) if model else ''}",
        "",
    ])  # fmt: skip
