"""The fast loop cannot be fooled: planted tests marked fast that load a model (by any
import path, or in a child process), train or build the service fail; a clean one passes."""

from __future__ import annotations

import shutil
import subprocess
import sys
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

PLANTED = """
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.fast


def test_loads_by_the_direct_import():
    from privlm.models.loading import load_public_model

    load_public_model("tiny")


def test_loads_a_transformers_model_itself():
    from transformers import LlamaConfig, LlamaForCausalLM

    LlamaForCausalLM(LlamaConfig(hidden_size=8, intermediate_size=8, num_hidden_layers=1,
                                 num_attention_heads=1, vocab_size=16))


def test_loads_in_a_child_process():
    code = "from privlm.models import load_public_model; load_public_model('tiny')"
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert child.returncode == 0, child.stderr[-400:]


def test_trains():
    p = torch.nn.Parameter(torch.zeros(2))
    torch.optim.SGD([p], lr=0.1)


def test_builds_the_service(tmp_path):
    from privlm.service.app import ServiceSettings, create_app

    create_app(ServiceSettings(data_dir=tmp_path, db_url=f"sqlite:///{tmp_path}/s.db"))


def test_clean_math():
    assert torch.tensor([1.0, 2.0]).sum().item() == 3.0
"""


def test_planted_heavy_tests_fail_the_fast_loop_and_a_clean_one_passes(tmp_path):
    root = Path(__file__).parent
    where = root / f"planted_{uuid.uuid4().hex[:8]}"  # under tests/: its conftest applies
    where.mkdir()
    try:
        (where / "__init__.py").write_text("")
        (where / "test_planted.py").write_text(PLANTED)
        report = tmp_path / "report.xml"
        subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "fast",
             f"--junitxml={report}", str(where / "test_planted.py")],
            cwd=root.parent, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        outcome = {}
        for case in ET.parse(report).iter("testcase"):
            failure = next((c for c in case if c.tag in ("failure", "error")), None)
            outcome[case.get("name")] = None if failure is None else failure.get("message", "")
    finally:
        shutil.rmtree(where)
    assert outcome.pop("test_clean_math") is None
    assert set(outcome) == {
        "test_loads_by_the_direct_import", "test_loads_a_transformers_model_itself",
        "test_loads_in_a_child_process", "test_trains", "test_builds_the_service",
    }  # fmt: skip
    for name, message in outcome.items():
        assert message is not None, f"{name} passed the fast loop"
    assert "loads a model" in outcome["test_loads_by_the_direct_import"]
    assert "loads a model" in outcome["test_loads_in_a_child_process"]
    assert "trains" in outcome["test_trains"]
    assert "web service" in outcome["test_builds_the_service"]
