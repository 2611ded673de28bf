"""Each job's settings are defined once, in its config class; the CLI's options
and the service's request models take their defaults (and bounds) from it. These tests walk
every job command and request model, so a default restated by hand that drifts fails."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import BaseModel

from privlm.config import option, setting, setting_of, settings_of
from privlm.errors import PrivlmError
from privlm.predict.pmixed import PMixEDConfig
from privlm.predict.submix import SubMixConfig
from privlm.prompting.pate_pipeline import PromptPateConfig
from privlm.service.job_params import (
    DpSgdParams,
    EnsembleParams,
)
from privlm.training.dpsgd import DpSgdConfig
from privlm.training.lora_finetune import LoraTrainingConfig

pytestmark = pytest.mark.fast

# parameters named like a setting of their command's config class yet deliberately not that
# setting, with the reason
NOT_SETTINGS: dict[tuple[str, str], str] = {
    ("synth", "count"): "takes a number or auto, so it sets count or auto_count; its default "
    "and help are read from SynthConfig's two settings (privlm.cli.synth)",
}


def every_command():
    """(path, click command) of every leaf command of the whole command line."""
    import importlib

    import typer

    def walk(cmd, path):
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in subs.items():
                yield from walk(sub, [*path, name])
        else:
            yield " ".join(path), cmd

    yield from walk(typer.main.get_command(importlib.import_module("privlm.cli").full_app()), [])


def deployment_variants():
    """The deployment request's variants, one per registered mechanism."""
    import typing

    from privlm.service.deployments import deployment_request

    union = typing.get_args(deployment_request())[0]
    return [typing.get_args(v)[0] for v in typing.get_args(union)]


def every_request_model():
    """Every pydantic model the service defines, found by walking privlm.service, and the
    deployment request's variants (made from the mechanisms' registry)."""
    import importlib
    import pkgutil

    import privlm.service

    for info in pkgutil.walk_packages(privlm.service.__path__, "privlm.service."):
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if (isinstance(obj, type) and issubclass(obj, BaseModel)
                    and obj.__module__ == module.__name__):  # fmt: skip
                yield obj
    yield from deployment_variants()


def marked_setting(param):
    """The (config class, setting) a CLI option was generated from by ``option``, or None."""
    return getattr(param.callback, "privlm_setting", None)


def test_every_cli_option_of_a_setting_is_generated_from_its_config_class():
    """Every command, found by walking the command line: an option made by ``option`` has
    its setting's default; any other parameter named like a setting of the same command's
    config classes is a listed, reasoned exception (a default restated by hand fails)."""
    checked = commands = 0
    for path, cmd in every_command():
        classes = {marked_setting(p)[0] for p in cmd.params if marked_setting(p)}
        commands += bool(classes)
        for param in cmd.params:
            mark = marked_setting(param)
            if mark is not None:
                assert param.default == setting_of(*mark).default, f"{path} --{param.name}"
                checked += 1
                continue
            clash = [c.__name__ for c in classes if param.name in settings_of(c)]
            assert not clash or (path, param.name) in NOT_SETTINGS, (
                f"{path} --{param.name} restates a setting of {clash} by hand: use option()"
            )
    assert commands >= 9 and checked >= 60


def test_every_service_field_of_a_setting_is_generated_from_its_config_class():
    """Every request model, found by walking privlm.service: a field made by
    ``request_field`` has its setting's default and help; any other field named like a
    setting of the same model's config classes is a listed exception."""
    import importlib

    def origin(info):
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        where = extra.get("x-privlm-setting")
        if where is None:
            return None
        cls_name, name = str(where).split(".")
        return CLASSES[cls_name], name

    checked = 0
    for model in every_request_model():
        marked = {f: origin(i) for f, i in model.model_fields.items() if origin(i)}
        classes = {cls for cls, _ in marked.values()}
        for field, info in model.model_fields.items():
            if field in marked:
                s = setting_of(*marked[field])
                assert info.default == s.default and info.description == s.help, (
                    f"{model.__name__}.{field}"
                )
                checked += 1
            else:
                clash = [c.__name__ for c in classes if field in settings_of(c)]
                derived = getattr(model, "DERIVED", {})  # a mechanism derives it (its record)
                assert not clash or (model.__name__, field) in NOT_SETTINGS or field in derived, (
                    f"{model.__name__}.{field} restates a setting of {clash}: use request_field()"
                )
    assert checked >= 40
    assert importlib.import_module("privlm.service.job_params").DpSgdParams in set(
        every_request_model()
    )


def test_the_drifted_defaults_are_one_value_now():
    assert DpSgdParams().batch_size == DpSgdConfig().batch_size == 64
    ens = EnsembleParams()
    assert (ens.epochs, ens.block_size) == (
        LoraTrainingConfig().epochs,
        LoraTrainingConfig().block_size,
    )
    from privlm.service.deployments import parse_request, request_config

    dep = parse_request({"job_id": "j"})  # mechanism: pmixed by default
    assert (dep.sample_rate, dep.queries) == (PMixEDConfig().sample_rate, PMixEDConfig().queries)
    assert (dep.epsilon, dep.alpha) == (PMixEDConfig().epsilon, PMixEDConfig().alpha)
    sub = parse_request({"job_id": "j", "mechanism": "submix"})
    assert (sub.epsilon, sub.alpha) == (SubMixConfig().epsilon, SubMixConfig().alpha)
    assert request_config(sub) == SubMixConfig()  # β = ε/T at the defaults
    assert request_config(dep) == PMixEDConfig()


def config_classes() -> list[type]:
    """Every config class in privlm (a dataclass with a setting), found by walking the
    package, so that a new one is checked without being listed here."""
    import importlib
    import pkgutil

    import privlm

    found: dict[str, type] = {}
    for info in pkgutil.walk_packages(privlm.__path__, "privlm."):
        if ".cli" in info.name or info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if (isinstance(obj, type) and dataclasses.is_dataclass(obj)
                    and obj.__module__ == module.__name__ and settings_of(obj)):  # fmt: skip
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return [found[k] for k in sorted(found)]


def outside(bound: str, limit: float, is_int: bool) -> float:
    """A value just outside a bound: at a strict one, beyond a closed one."""
    step = 1 if is_int else max(abs(limit) * 1e-3, 1e-9)
    return {"gt": limit, "lt": limit, "ge": limit - step, "le": limit + step}[bound]


def test_every_config_class_refuses_every_bound_where_it_is_built():
    """Each declared bound (strict ones included) is enforced by the constructor itself, in
    the library, so the CLI and the service inherit it; the message names the setting."""
    classes = config_classes()
    assert {PMixEDConfig, SubMixConfig, DpSgdConfig, PromptPateConfig} <= set(classes)
    checked = 0
    for cls in classes:
        for s in settings_of(cls).values():
            for bound, limit in s.bounds.items():
                is_int = isinstance(s.default, int) and not isinstance(s.default, bool)
                bad = outside(bound, limit, is_int)
                with pytest.raises(PrivlmError, match=rf"\b{s.name} must"):
                    cls(**{s.name: int(bad) if is_int else bad})
                checked += 1
            if s.choices:
                with pytest.raises(PrivlmError, match=rf"\b{s.name} must be one of"):
                    cls(**{s.name: "no-such-choice"})
    assert checked > 40


def test_every_config_class_refuses_a_required_number_given_as_none():
    """A setting whose type has no None (PromptDpSgdConfig's target ε) is refused as None
    when the config is built, naming the setting, not later in the run (a TypeError in
    calibrate_noise_multiplier); a word for a number likewise."""
    from privlm.prompting.config import PromptDpSgdConfig

    with pytest.raises(PrivlmError, match=r"\btarget_epsilon must be a float, got None"):
        PromptDpSgdConfig(target_epsilon=None)  # type: ignore[arg-type]
    checked = 0
    for cls in config_classes():
        declared = {f.name: str(f.type) for f in dataclasses.fields(cls)}
        for s in settings_of(cls).values():
            kinds = {t.strip() for t in declared[s.name].split("|")}
            if "None" in kinds or not kinds <= {"float", "int", "str", "bool"}:
                continue
            with pytest.raises(PrivlmError, match=rf"\b{s.name} must be"):
                cls(**{s.name: None})
            if kinds & {"float", "int"}:
                with pytest.raises(PrivlmError, match=rf"\b{s.name} must be"):
                    cls(**{s.name: "8"})
            checked += 1
    assert checked > 60


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["--delta", "2.0"], "'--delta': must be less than 1"),
        (["--delta", "0"], "'--delta': must be greater than 0"),
        (["--epsilon", "-1"], "'--epsilon': must be greater than 0"),
        (["--sample-rate", "1.5"], "'--sample-rate': must be at most 1"),
    ],
)
def test_strict_bounds_reach_the_cli(args, why):
    from typer.testing import CliRunner

    from privlm.cli import app

    res = CliRunner().invoke(app, ["plan", "pmixed", *args])
    assert res.exit_code == 2 and why in res.output.replace("\n", " "), res.output


def test_cli_help_and_request_schema_carry_the_bounds():
    import typer

    opt = option(DpSgdConfig, "batch_size")
    assert opt.default == 64 and "Range: ≥ 1" in opt.help
    with pytest.raises(typer.BadParameter, match="must be at least 1"):
        opt.callback(0)
    schema = DpSgdParams.model_json_schema()["properties"]["batch_size"]
    assert schema["default"] == 64 and schema["minimum"] == 1
    assert schema["description"] == setting_of(DpSgdConfig, "batch_size").help
    assert schema["x-privlm-setting"] == "DpSgdConfig.batch_size"


def test_a_setting_copies_mutable_defaults():
    @dataclasses.dataclass
    class Demo:
        names: list[str] = setting(["a"], "names")  # noqa: RUF009

    one, two = Demo(), Demo()
    one.names.append("b")
    assert two.names == ["a"]


CLASSES = {cls.__name__: cls for cls in config_classes()}


class _Captured(Exception):
    pass


def _capture(monkeypatch, module: str, name: str) -> dict:
    """Replace ``module.name`` (a training entry point) by one that records its config and
    stops: the CLI's checks and planning run, the training does not."""
    import importlib

    seen: dict = {}

    def fake(*args, **kwargs):
        seen["config"] = args[3]
        raise _Captured

    monkeypatch.setattr(importlib.import_module(module), name, fake)
    return seen


def test_a_dpsgd_config_round_trips_through_cli_service_and_library(tmp_path, monkeypatch):
    """The same settings given to the CLI, the service and the library make one config."""
    from typer.testing import CliRunner

    from privlm.cli import app
    from privlm.service.job_kinds import validate_params

    seen = _capture(monkeypatch, "privlm.training.dpsgd", "train_dpsgd")
    (tmp_path / "d.txt").write_text("\n".join(f"note {i}" for i in range(40)))
    settings = {"epsilon": 2.0, "epochs": 2, "batch_size": 16, "physical_batch_size": 4,
                "learning_rate": 1e-3, "rank": 8, "block_size": 64, "max_grad_norm": 0.5}  # fmt: skip
    args = ["train", "dpsgd", str(tmp_path / "d.txt"), "--out", str(tmp_path / "o"),
            "--delta", "1e-6", "--ledger", str(tmp_path / "l.db")]  # fmt: skip
    for k, v in settings.items():
        args += ["--lr" if k == "learning_rate" else f"--{k.replace('_', '-')}", str(v)]
    CliRunner().invoke(app, args)
    service = validate_params("dpsgd", settings)
    assert isinstance(service, DpSgdParams)
    library = DpSgdConfig(**{("target_epsilon" if k == "epsilon" else k): v
                             for k, v in settings.items()}, delta=1e-6)  # fmt: skip
    assert seen["config"] == service.config(1e-6) == library


def test_a_jft_config_round_trips_through_cli_service_and_library(tmp_path, monkeypatch):
    """JFT's phase-1 settings have one builder (``JftConfig.phase1_lora``): the CLI, the
    service and the library reach the same phase 1."""
    from typer.testing import CliRunner

    from privlm.cli import app
    from privlm.service.job_kinds import validate_params
    from privlm.service.job_params import JftParams
    from privlm.training.config import JftConfig

    seen = _capture(monkeypatch, "privlm.training.jft", "train_jft")
    (tmp_path / "d.txt").write_text("\n".join(f"note {i}" for i in range(40)))
    CliRunner().invoke(app, [
        "train", "jft", str(tmp_path / "d.txt"), "--out", str(tmp_path / "o"), "--delta", "1e-6",
        "--ledger", str(tmp_path / "l.db"), "--detector", "regex", "--phase1-epochs", "2",
        "--phase1-lr", "1e-3", "--rank", "8", "--block-size", "64",
    ])  # fmt: skip
    service = validate_params("jft", {"detector": "regex", "phase1_epochs": 2,
                                      "phase1_learning_rate": 1e-3, "rank": 8, "block_size": 64})  # fmt: skip
    assert isinstance(service, JftParams)
    library = JftConfig(
        detector="regex", phase1_epochs=2, phase1_learning_rate=1e-3,
        phase2=DpSgdConfig(delta=1e-6, rank=8, block_size=64),
    )  # fmt: skip
    cli = seen["config"]
    assert cli.phase1_lora() == service.config(1e-6).phase1_lora() == library.phase1_lora()
    assert cli.phase2 == service.config(1e-6).phase2 == library.phase2
    assert library.phase1_lora().rank == 8 and library.phase1_lora().learning_rate == 1e-3


def test_every_setting_is_a_service_field_or_withheld_with_a_reason():
    """A setting added to a config class reaches the service's request model, or is
    withheld there with a reason: a decision, never an oversight. The runner builds the
    config from every field that is a setting (``JobParams.settings``), with no mapping by
    hand."""
    from privlm.predict.mechanisms import mechanism
    from privlm.service.job_kinds import JOB_KINDS

    for kind in JOB_KINDS.values():
        params = kind.params
        exposed = {params.RENAMED.get(f, f) for f in params.model_fields}
        for cls in kind.configs:
            undecided = set(settings_of(cls)) - exposed - set(params.WITHHELD)
            assert not undecided, f"{params.__name__}: {cls.__name__}.{sorted(undecided)}"
        assert all(reason for reason in params.WITHHELD.values())
        assert not exposed & set(params.WITHHELD), params.__name__
    variants = deployment_variants()
    assert len(variants) >= 4
    for variant in variants:  # a deployment: every setting of its mechanism's config
        m = mechanism(variant.privlm_mechanism)
        undecided = set(settings_of(m.config)) - set(variant.model_fields) - set(m.withheld)
        assert not undecided, f"{m.name}: {sorted(undecided)}"
        assert all(m.withheld.values()) and not set(variant.model_fields) & set(m.withheld)


def test_cli_settings_makes_every_setting_an_option_and_passes_them_as_one_dict():
    """A setting added to a config class is a CLI option with no other edit."""
    import typer
    from typer.testing import CliRunner

    from privlm.config import check_settings, cli_settings

    @dataclasses.dataclass
    class Demo:
        rate: float = setting(0.5, "a rate", gt=0, le=1)
        mode: str = setting("a", "a mode", choices=("a", "b"))
        fast: bool = setting(False, "go fast")
        count: int | None = setting(None, "how many", ge=1)

        def __post_init__(self) -> None:
            check_settings(self)

    seen = {}
    demo = typer.Typer()

    @demo.command()
    @cli_settings(Demo, into="settings", decls={"rate": ("--r",)})
    def run(
        out: str = typer.Option(..., "--out"), verbose: bool = False, *, settings: dict
    ) -> None:
        seen.update(out=out, verbose=verbose, config=Demo(**settings))

    res = CliRunner().invoke(demo, ["--out", "x", "--r", "0.25", "--mode", "b", "--fast",
                                    "--count", "3"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert seen == {"out": "x", "verbose": False,
                    "config": Demo(rate=0.25, mode="b", fast=True, count=3)}  # fmt: skip
    assert CliRunner().invoke(demo, ["--out", "x"]).exit_code == 0
    assert seen["config"] == Demo()
    refused = CliRunner().invoke(demo, ["--out", "x", "--r", "2"])
    assert refused.exit_code == 2 and "at most 1" in refused.output
    helped = CliRunner().invoke(demo, ["--help"]).output
    assert helped.index("--out") < helped.index("--r") < helped.index("--verbose")
    assert "--no-fast" not in helped


NO_JSON = {"serve", "service worker", "data fetch", "detect corpus", "detect train-tagger",
           "service key-add", "service key-revoke", "service keys add", "service keys revoke",
           "service admin-keys add", "service admin-keys revoke"}  # fmt: skip
MODEL_COMMANDS = {"quickstart", "synth", "ensemble train", "eval ppl", "audit extraction",
                  "audit exposure", "train dpsgd", "train jft", "prompt dpsgd", "prompt pate",
                  "prompt eval", "prompt mia"}  # fmt: skip


def test_the_readmes_claims_about_json_device_and_dtype_hold():
    """README: every command that reports a result takes --json (the exceptions it names);
    every command that loads a public model to train, generate or score takes --device and
    --dtype. A new command must join one side or the README's list."""
    from pathlib import Path

    readme = Path(__file__).resolve().parents[1].joinpath("README.md").read_text()
    params = {path: {p.name for p in cmd.params} for path, cmd in every_command()}
    assert {p for p, names in params.items() if "as_json" not in names} == NO_JSON
    for path in NO_JSON:
        assert f"`{path}`" in readme or path.startswith(("service key", "service admin-keys"))
    for path in MODEL_COMMANDS:
        assert {"device", "dtype"} <= params[path], path
    loads = {p for p, names in params.items() if "model" in names}
    assert loads - MODEL_COMMANDS <= {"serve", "data inspect", "detect train-tagger",
                                      "service worker"}  # fmt: skip
