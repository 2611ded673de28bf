"""The README's Python example runs as written (on the tiny model, in a scratch folder):
the one shape of the entry points and the factory, as a user meets them first."""

from __future__ import annotations

import re
from pathlib import Path

from privlm.data import Dataset, Record

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    (example,) = [b for b in blocks if "build_predictor(" in b]
    return example


def test_the_readme_python_example_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = readme_example().replace('"smollm2-135m"', '"tiny"')
    records = Dataset(
        [Record(f"patient {i} was seen on monday and feels better", f"user-{i}") for i in range(24)],
        "notes", "user",
    )  # fmt: skip
    exec(compile(code, "README.md", "exec"), {"records": records})
    assert (tmp_path / "dp-adapter" / "privacy.json").is_file()
    assert (tmp_path / "ens" / "manifest.json").is_file()
    assert capsys.readouterr().out  # the private tokens were printed
    from privlm.accounting import PrivacyLedger

    budget = PrivacyLedger(tmp_path / "ledger.db", "notes")  # one budget for both releases
    assert [c.mechanism for c in budget.charges()] == ["dpsgd", "deployment-reservation"]
    assert budget.spent().epsilon <= budget.budget.epsilon
    tokens = PrivacyLedger(tmp_path / "ledger.db", "deployment-demo")
    assert tokens.count() == 16
