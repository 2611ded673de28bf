"""The budgets an ensemble has been deployed under, so that a second one is not started
unnoticed.

Every token a PMixED or SubMix deployment releases is charged to its ledger (a SQLite file
and a name within it). Two deployments of one ensemble under two ledger names draw on two
budgets for the *same* private data: an observer of both sees the composition of both, and
their ε add up. The service charges every deployment of a dataset's ensembles to that
dataset's one ledger; in the CLI the ledger is named per call, so the ensemble records each
(ledger, name) it was used under in ``budgets.json``, and ``privlm generate`` warns when it
is about to start another (docs/sharp_edges.md, "What leaves with an artefact").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypedDict

from privlm.fsutil import write_json_atomically

BUDGETS = "budgets.json"


class BudgetName(TypedDict):
    ledger: str
    name: str


def budgets_used(ensemble_dir: str | Path) -> list[BudgetName]:
    """The (ledger, name) pairs the ensemble has been deployed under, oldest first."""
    path = Path(ensemble_dir) / BUDGETS
    if not path.is_file():
        return []
    entries: list[BudgetName] = json.loads(path.read_text()).get("budgets", [])
    return entries


def record_budget(ensemble_dir: str | Path, ledger: str | Path, name: str) -> list[BudgetName]:
    """Record that the ensemble is deployed under (``ledger``, ``name``); returns the *other*
    budgets it was deployed under before, which this one adds to (empty: no second budget)."""
    this: BudgetName = {"ledger": str(Path(ledger).resolve()), "name": name}
    known = budgets_used(ensemble_dir)
    if this not in known:
        write_json_atomically(Path(ensemble_dir) / BUDGETS, {"budgets": [*known, this]})
    return [b for b in known if b != this]


def second_budget_warning(ensemble_dir: str | Path, others: list[BudgetName]) -> str:
    """What ``privlm generate`` prints when ``others`` is not empty."""
    used = "; ".join(f"--ledger {b['ledger']} --name {b['name']}" for b in others)
    return (
        f"{ensemble_dir} is deployed under more than one budget (also: {used}). Each ledger "
        "name is a separate budget for the same private data: whoever sees the tokens of "
        "every deployment sees their composition, and their ε add up. Keep to one --ledger "
        "and --name"
    )
