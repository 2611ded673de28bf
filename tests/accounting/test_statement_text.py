"""Every "(ε, δ)-DP" privlm writes is built by one function from recorded figures, so the
CLI line, the files, the API answers and the model cards cannot round or word one charge
differently (docs/sharp_edges.md, "Statements")."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from privlm.accounting import Charge, RdpCurve, Relation
from privlm.accounting.statements import guarantee_of, guarantee_text, pair_text
from privlm.training.model_card import guarantee_line

pytestmark = pytest.mark.fast

SRC = Path(__file__).resolve().parents[2] / "src" / "privlm"
HOME = SRC / "accounting" / "statements.py"
# an f-string that writes two figures as a pair and then "-DP" or "-SDP", or as
# "ε = …, δ = …" (a statement in other words)
PAIR_THEN_DP = re.compile(r"\(\{[^{}]+\}, \{[^{}]+\}\)-S?DP|ε = \{[^{}]+\}, δ = \{[^{}]+\}")


def formatted_pairs(path: Path) -> list[str]:
    """``path:line: f-string`` for each f-string in ``path`` that formats a DP pair."""
    source = path.read_text(encoding="utf-8")
    found = []
    for node in ast.walk(ast.parse(source)):
        text = ast.get_source_segment(source, node) if isinstance(node, ast.JoinedStr) else None
        if text and PAIR_THEN_DP.search(text):
            found.append(f"{path.name}:{node.lineno}: {text[:80]}")
    return sorted(set(found))


def test_no_module_but_statements_formats_a_dp_pair():
    hits = [hit for p in sorted(SRC.rglob("*.py")) if p != HOME for hit in formatted_pairs(p)]
    assert not hits, "format through statements.guarantee_text:\n" + "\n".join(hits)


def test_the_scan_sees_a_pair_formatted_by_hand(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('eps, d = 1.0, 1e-5\nline = f"adapter: ({eps:.4g}, {d:g})-DP per user"\n')
    assert formatted_pairs(bad)
    bad.write_text('eps, d = 1.0, 1e-5\nline = f"prompt: ε = {eps:.4g}, δ = {d:.3g} per user"\n')
    assert formatted_pairs(bad)


def test_a_guarantee_a_model_card_and_a_cli_line_write_one_charge_alike():
    curve = RdpCurve.from_mapping({2.0: 0.31, 4.0: 0.77, 8.0: 1.9, 16.0: 4.2})
    g = guarantee_of([Charge("run", rdp=curve, relation=Relation.USER)] * 3, 1e-5)
    card = guarantee_line({"epsilon": g.epsilon, "delta": g.delta, "unit_detail": "user"})
    assert g.text == card == guarantee_text(g.epsilon, g.delta, "user")
    assert g.text.startswith(pair_text(g.epsilon, g.delta))


def test_a_selective_dp_card_names_both_figures_through_the_same_text():
    card = guarantee_line(
        {"epsilon": 3.21234, "delta": 1e-6, "guarantee_kind": "SDP", "policy": "pii",
         "dp_epsilon": 40.5}
    )  # fmt: skip
    assert card == ("(3.212, 1e-06)-SDP under the policy 'pii'; ordinary DP: (40.5, 1e-06)-DP")
