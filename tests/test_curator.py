"""What an artefact releases is declared key by key (a release schema per mechanism): a key
the schema does not name never leaves, a new one included (fail-closed)."""

from __future__ import annotations

import json

import pytest

from privlm.curator import (
    PRIVATE_STATISTICS,
    PUBLIC,
    curator_report_path,
    release_statement,
    split_statement,
)

pytestmark = pytest.mark.fast


def schemas():
    from privlm.prompting.pate_pipeline import RELEASES as PATE
    from privlm.prompting.prompt_dpsgd import RELEASES as PROMPT
    from privlm.training.dpsgd import RELEASES as DPSGD
    from privlm.training.dpsgd import RUN_RELEASES
    from privlm.training.jft import RELEASES as JFT

    return {"dpsgd": DPSGD, "dpsgd-run": RUN_RELEASES, "jft": JFT, "prompt-dpsgd": PROMPT,
            "pate": PATE}  # fmt: skip


def public_keys(schema, path=""):
    for key, rule in schema.items():
        where = f"{path}.{key}" if path else key
        if rule == PUBLIC:
            yield key, where
        else:
            yield from public_keys(rule, where)


def test_an_undeclared_key_goes_to_the_curator_whatever_it_is(tmp_path):
    schema = {"epsilon": PUBLIC, "training": {"targets": PUBLIC}}
    full = {
        "epsilon": 3.0,
        "brand_new_statistic": 41,  # a key someone added later
        "training": {"targets": ["q_proj"], "steps": 12, "final_loss": 2.0},
    }
    split = split_statement(full, schema)
    assert split.released == {"epsilon": 3.0, "training": {"targets": ["q_proj"]}}
    assert split.curator == {"brand_new_statistic": 41, "training.steps": 12,
                             "training.final_loss": 2.0}  # fmt: skip
    out = tmp_path / "adapter"
    assert release_statement(full, schema, out) == split.released
    report = json.loads(curator_report_path(out).read_text())
    assert report["statistics"]["brand_new_statistic"] == 41
    # a value where a mapping was declared is not released either
    assert split_statement({"training": 7}, schema).curator == {"training": 7}


@pytest.mark.parametrize("name", ["dpsgd", "dpsgd-run", "jft", "prompt-dpsgd", "pate"])
def test_no_schema_releases_an_exact_statistic_of_the_data(name):
    released = {key for key, _ in public_keys(schemas()[name])}
    assert not released & PRIVATE_STATISTICS, sorted(released & PRIVATE_STATISTICS)
