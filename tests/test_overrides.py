"""`--config.x=v` sets any field a typed config declares (`prd_jax.config_schema`), listed in
the config file or not; unknown fields name the nearest ones, wrong types the type expected;
`--print-config` prints the resolved config with every default; every bad override is one
`prd-jax COMMAND: error:` line with exit status 2, the demo's included. No model is loaded."""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import runpy
import types

import pytest

from prd_jax import cli, config_check, config_schema
from prd_jax.config_check import load, validate
from prd_jax.config_fields import declared, resolved as resolved_config
from prd_jax.config_io import apply_overrides, load_config
from prd_jax.config_schema import REQUIRED, leaves

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RL_TINY = os.path.join(ROOT, "configs", "rl", "tiny.py")
SFT_TINY = os.path.join(ROOT, "configs", "sft", "tiny.py")
GSM8K = os.path.join(ROOT, "configs", "eval", "smollm2_gsm8k.py")
GPTOSS_PAIRRL = os.path.join(ROOT, "configs", "rl", "gptoss20b_pairrl.py") + ":8xh200"


class RecordingTask:
    """A task that records the splits it is asked for (the split reads of `train.setup`)."""

    name, templates = "recording", "compact"

    def __init__(self, splits=("train", "validation", "test")):
        self.source = types.SimpleNamespace(split_names=splits)
        self.asked = []

    def problems(self, split, limit=None, data_dir=None):
        self.asked.append(split)
        return [{"id": f"{split}0", "problem": "1+1", "answer": "2", "solution": "2"}]

    def problem_text(self, row):
        return row["problem"]

    def gold_key(self, row):
        return row["answer"]

    def sft_target(self, row):
        return row["solution"]


# ----------------------------------------------------------------- the five examples


def test_rl_fields_the_file_does_not_list_reach_rlconfig():
    from prd_jax.train.rl import RLConfig

    config = load_config(RL_TINY)
    assert "minibatches" not in config.rl and "cispo_lower_clip" not in config.rl
    apply_overrides(config, ["--config.rl.minibatches=2", "--config.rl.cispo_lower_clip=True"])
    rl = RLConfig.from_config(config)
    assert (rl.minibatches, rl.cispo_lower_clip) == (2, True)
    # the spelling `cispo_lower_clip=0.1` is no bool: refused, naming the type
    with pytest.raises(ValueError, match=r"--config\.rl\.cispo_lower_clip='0\.1': expected bool \(declared by RLConfig\)"):
        apply_overrides(load_config(RL_TINY), ["--config.rl.cispo_lower_clip=0.1"])


def test_split_reaches_the_rl_problems():
    from prd_jax.train.setup import rl_problems

    config = load_config(RL_TINY)
    del config["split"]  # the declared default
    task = RecordingTask()
    rl_problems(config, task)
    apply_overrides(config, ["--config.split=test"])
    rl_problems(config, task)
    assert task.asked == ["train", "test"]


def test_sft_eval_split_reaches_the_held_out_read():
    from prd_jax.data.synthetic import CharVocab
    from prd_jax.train.setup import _task_sft_examples

    config = load_config(SFT_TINY)
    assert "eval_split" not in config.data
    apply_overrides(config, ["--config.data.eval_split=test"])
    task = RecordingTask()
    train, held = _task_sft_examples(config, CharVocab(), task)
    assert task.asked == ["train", "test"] and len(train) == len(held) == 1


def test_model_override_the_file_does_not_list_reaches_the_model_config():
    from prd_jax.model.config import NAMED_CONFIGS
    from prd_jax.train.setup import model_overrides

    config = load_config(GPTOSS_PAIRRL)
    assert "router_aux_loss_coef" not in config.model.overrides
    apply_overrides(config, ["--config.model.overrides.router_aux_loss_coef=0.01"])
    cfg = NAMED_CONFIGS[config.model.name].replace(**model_overrides(config))
    assert cfg.router_aux_loss_coef == 0.01 and cfg.num_experts == 32


def test_demo_adaptive_field_merges_with_the_preset():
    from prd_jax.demo import PRESETS, adaptive_operators

    config = load(os.path.join(ROOT, "configs", "demo.py"), ["--config.adaptive.tau=0.5"], kind="demo")
    entry = adaptive_operators(config)["adaptive_pdr"]
    preset = PRESETS["preimage"]["adaptive"]
    assert entry["tau"] == 0.5 and preset["tau"] != 0.5
    assert (entry["waves"], entry["min_fanout"], entry["max_fanout"]) == (
        preset["waves"], preset["min_fanout"], preset["max_fanout"])
    quick = load(os.path.join(ROOT, "configs", "demo.py"), ["--config.quick=True", "--config.adaptive.tau=0.25"],
                 kind="demo")
    assert adaptive_operators(quick)["adaptive_pdr"]["tau"] == 0.25  # a field given beats the quick version's


# ----------------------------------------------------------------- conversion and errors


@pytest.mark.parametrize("spec,override,path,expected", [
    (RL_TINY, "--config.rl.eps_low=0", "rl.eps_low", 0.0),  # an int where a float is declared
    (RL_TINY, "--config.rl.operator.schedule=(4, 1)", "rl.operator.schedule", (4, 1)),
    (RL_TINY, "--config.rl.operator.judge.max_new_tokens=0", "rl.operator.judge.max_new_tokens", 0),
    (RL_TINY, "--config.mesh=data=2,fsdp=1", "mesh", "data=2,fsdp=1"),  # a str field takes the text
    (RL_TINY, "--config.model.overrides.sliding_window=None", "model.overrides.sliding_window", None),
    (RL_TINY, "--config.model.overrides.scan_unroll=2", "model.overrides.scan_unroll", 2),
    (RL_TINY, "--config.model.overrides.enable_thinking=false", "model.overrides.enable_thinking", False),
    (RL_TINY, "--config.sampling.decode_layers=scan", "sampling.decode_layers", "scan"),
    (SFT_TINY, "--config.data.difficulty=[2, 3]", "data.difficulty", (2, 3)),
    (SFT_TINY, "--config.optim.b2=0.99", "optim.b2", 0.99),
    (GSM8K, "--config.backend.timeout_s=30", "backend.timeout_s", 30.0),
    (GSM8K, "--config.sampling.max_rows=8", "sampling.max_rows", 8),
])
def test_values_are_converted_to_the_declared_type(spec, override, path, expected):
    config = load(spec, [override])
    value = config_schema.value_at(config, path)
    assert value == expected and type(value) is type(expected), (value, type(value))
    validate(config)


def test_eval_fields_reach_evalconfig():
    from prd_jax.eval_config import EvalConfig

    raw = load_config(GSM8K)
    assert "backend" not in raw and "split" not in raw and "dtype" not in raw
    apply_overrides(raw, ["--config.backend.max_retries=2", "--config.split=train", "--config.dtype=bfloat16"])
    ec = EvalConfig.from_config(raw)
    assert (ec.backend.max_retries, ec.split, ec.model_overrides()) == (2, "train", {"dtype": "bfloat16"})


@pytest.mark.parametrize("spec,override,nearest", [
    (RL_TINY, "--config.rl.minibatchs=2", "config.rl.minibatches"),
    (RL_TINY, "--config.model.router_aux_loss_coef=0.01", "config.model.overrides.router_aux_loss_coef"),
    (RL_TINY, "--config.splt=test", "config.split"),
    (SFT_TINY, "--config.data.eval_splt=test", "config.data.eval_split"),
    (GSM8K, "--config.sampling.max_rowz=3", "config.sampling.max_rows"),
    (GSM8K, "--config.num_problem=3", "config.num_problems"),
])
def test_unknown_fields_name_the_nearest(spec, override, nearest):
    dotted = override[len("--config."):].split("=")[0]
    with pytest.raises(ValueError, match=rf"config has no field '{dotted}'; nearest: .*{nearest}\b") as e:
        load(spec, [override])
    assert "\n" not in str(e.value)


def test_unknown_sub_config_lists_the_fields_of_its_parent():
    with pytest.raises(ValueError, match=r"'rl\.nothing\.here'; fields of config\.rl: .*minibatches"):
        load(RL_TINY, ["--config.rl.nothing.here=1"])


def test_an_sft_config_declares_no_rl_fields():
    with pytest.raises(ValueError, match="config has no field 'rl.minibatches'"):
        load(SFT_TINY, ["--config.rl.minibatches=2"])


@pytest.mark.parametrize("spec,override,expected", [
    (RL_TINY, "--config.rl.minibatches=two", "expected int"),
    (RL_TINY, "--config.rl.minibatches=2.5", "expected int"),
    (RL_TINY, "--config.rl.eps_low=high", "expected float"),
    (RL_TINY, "--config.continual=1", "expected bool"),
    (RL_TINY, "--config.model.overrides.enable_thinking=maybe", r"expected Optional\[bool\]"),
    (SFT_TINY, "--config.data.difficulty=3", r"expected Optional\[tuple\]"),
    (GSM8K, "--config.k_samples=many", "expected int"),
    (GSM8K, "--config.sampling.top_k=0.5", "expected int"),
])
def test_wrong_types_name_the_type(spec, override, expected):
    dotted = override[len("--config."):].split("=")[0]
    with pytest.raises(ValueError, match=rf"--config\.{dotted}='[^']*': {expected}"):
        load(spec, [override])


def test_moved_keys_still_name_their_new_place():
    with pytest.raises(ValueError, match=r"config\.rl\.temperature moved to config\.sampling\.temperature"):
        load(RL_TINY, ["--config.rl.temperature=0.6"])


# ----------------------------------------------------------------- the schema is derived


def test_schema_is_derived_from_the_dataclasses():
    from prd_jax.backends.config import BackendConfig
    from prd_jax.eval_config import EvalConfig
    from prd_jax.model.config import ModelConfig
    from prd_jax.sampling import CONFIG_KEYS
    from prd_jax.train.optim import OptimConfig
    from prd_jax.train.rl import RLConfig

    def under(schema, prefix):
        return {p[len(prefix):] for p in schema if p.startswith(prefix) and "." not in p[len(prefix):]}

    names = lambda cls: {f.name for f in dataclasses.fields(cls)}  # noqa: E731
    rl = declared(load_config(RL_TINY))
    assert under(rl, "rl.") == names(RLConfig) - {"sampling"}
    assert under(rl, "model.overrides.") == names(ModelConfig)
    assert under(rl, "optim.") == names(OptimConfig)
    assert under(rl, "sampling.") == set(CONFIG_KEYS)
    ev = declared(load_config(GSM8K))
    assert under(ev, "") - {"sampling", "backend", "wandb"} == names(EvalConfig) - {"sampling", "backend", "wandb"}
    assert under(ev, "backend.") == names(BackendConfig)
    from prd_jax.tracking import WandbConfig

    assert under(ev, "wandb.") == under(rl, "wandb.") == names(WandbConfig)
    assert (ev["loggers"].default, rl["loggers"].default) == ((), ("tensorboard",))
    assert rl["rl.minibatches"].default == RLConfig.__dataclass_fields__["minibatches"].default
    from prd_jax.model.config import NAMED_CONFIGS

    tiny = NAMED_CONFIGS["tiny"]  # the named model's values are the overrides' defaults
    assert (rl["model.overrides.hidden"].default, rl["model.overrides.family"].default) == (tiny.hidden, tiny.family)


def test_a_new_dataclass_field_is_declared_without_a_table(monkeypatch):
    """A field added to EvalConfig (as `checkpoint` is) can be set at once."""
    from prd_jax import config_fields, eval_config

    @dataclasses.dataclass(frozen=True)
    class Extended(eval_config.EvalConfig):
        brand_new: int = 7

    monkeypatch.setattr(config_fields, "EvalConfig", Extended)
    schema = declared(load_config(GSM8K))
    assert schema["brand_new"].type is int and schema["brand_new"].default == 7
    assert load(GSM8K, ["--config.brand_new=9"]).brand_new == 9


def test_every_field_a_config_file_sets_is_declared():
    """Each config file's fields are in its schema: the table of raw reads cannot lag the files."""
    paths = [p for p in sorted(glob.glob(os.path.join(ROOT, "configs", "*", "*.py")))
             if not p.endswith("__init__.py")] + [os.path.join(ROOT, "configs", "demo.py")]
    checked, undeclared = 0, []
    for path in paths:
        args = runpy.run_path(path).get("ARGS", (None,))  # a paper-scale config: its first pod
        if not args:
            continue  # a helper (configs/eval/api_rows.py): nothing to load
        config = load(path if args[0] is None else f"{path}:{args[0]}")
        schema = config_check.fields(config)
        undeclared += [f"{os.path.relpath(path, ROOT)}: {p}" for p in leaves(config) if p not in schema]
        checked += 1
    assert checked >= 40 and not undeclared, undeclared


def test_typed_config_holds_the_declared_defaults():
    from prd_jax.data.synthetic import sft_traces
    from prd_jax.train.config import TrainConfig

    config = load_config(SFT_TINY)
    for key in ("pdr_fraction", "sr_fraction", "judge_fraction", "pdr_k", "mode"):
        del config.data[key]
    del config["grad_accum_steps"], config["max_nonfinite_steps"]
    tc = TrainConfig.from_config(config)
    settings = tc.data.trace_settings("modchain")
    import inspect
    signature = inspect.signature(sft_traces).parameters
    assert settings == {k: signature[k].default for k in ("pdr_fraction", "pdr_k", "sr_fraction", "judge_fraction")}
    assert (tc.grad_accum_steps, tc.max_nonfinite_steps, tc.data.mode) == (1, 5, "pack")
    del config["steps"]
    with pytest.raises(ValueError, match=r"missing \['config.steps'\] \(each is required\)"):
        TrainConfig.from_config(config)


def _main(argv, capsys):
    """(exit status, stdout, stderr) of `prd-jax ARGV`."""
    try:
        cli.main(argv)
        code = 0
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_print_config_shows_defaults_and_loads_no_model(capsys, monkeypatch):
    import prd_jax.model.loader as loader

    monkeypatch.setattr(loader, "load", lambda *a, **k: pytest.fail("--print-config loaded a model"))
    code, out, err = _main(["train", "--config", RL_TINY, "--print-config", "--config.rl.minibatches=2",
                            "--config.grad_accum_steps=2"], capsys)
    assert code == 0, err
    resolved = json.loads(out)
    assert resolved["rl"]["minibatches"] == 2 and resolved["rl"]["updates_per_batch"] == 1
    assert resolved["rl"]["cispo_lower_clip"] is False and resolved["split"] == "train"
    assert resolved["optim"]["b1"] == 0.9 and resolved["model"]["overrides"]["router_aux_loss_coef"] == 0.0
    assert resolved["sampling"]["compact_ratio"] == 0.5 and resolved["rl"]["operator"] is None
    assert resolved["data"]["eval_split"] == "validation" and resolved["max_nonfinite_steps"] == 5

    code, out, err = _main(["eval", "--config", GSM8K, "--print-config"], capsys)
    assert code == 0, err
    resolved = json.loads(out)
    assert (resolved["split"], resolved["target"], resolved["backend"]["kind"]) == ("", "", "jax")
    assert resolved["sampling"]["decode_layers"] == "unrolled"

    code, out, err = _main(["compile", "--config", GPTOSS_PAIRRL, "--print-config",
                            "--config.model.overrides.router_aux_loss_coef=0.01"], capsys)
    assert code == 0, err
    assert json.loads(out)["model"]["overrides"]["router_aux_loss_coef"] == 0.01

    code, out, err = _main(["demo", "--print-config", "--config.adaptive.tau=0.5"], capsys)
    assert code == 0, err
    assert json.loads(out)["adaptive"]["tau"] == 0.5


def test_resolved_config_fills_only_what_is_missing():
    config = load_config(RL_TINY)
    before = leaves(config)
    resolved = leaves(resolved_config(config))
    assert {k: resolved[k] for k in before} == before
    added = {k for k in resolved if k not in before}
    schema = declared(config)
    assert added and all(k in schema and schema[k].default is not REQUIRED for k in added)


@pytest.mark.parametrize("argv,message", [
    (["demo", "--config.adaptive.tau=x"], "--config.adaptive.tau='x': expected Optional[float]"),
    (["demo", "--config.adaptiv.tau=0.5"], "nearest: config.adaptive.tau"),
    (["demo", "--config.budgett=3"], "nearest: config.budget"),
    (["train", "--config", RL_TINY, "--workdir", "W", "--config.rl.minibatchs=2"], "nearest: config.rl.minibatches"),
    (["eval", "--config", GSM8K, "--workdir", "W", "--config.num_problems=lots"], "expected int"),
    (["compile", "--config", RL_TINY, "--config.rl.eps_low=high"], "expected float"),
    (["train", "--config", RL_TINY, "--print-config", "--config.rl.minibatches=2"],
     "config.rl.minibatches=2 must divide config.grad_accum_steps=1"),
    (["train", "--config", RL_TINY], "the following arguments are required: --workdir"),
])
def test_bad_overrides_are_one_line_with_status_2(argv, message, capsys, tmp_path):
    argv = [str(tmp_path / a) if a == "W" else a for a in argv]
    code, out, err = _main(argv, capsys)
    assert code == cli.EXIT_ERROR and out == ""
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[-1].startswith(f"prd-jax {argv[0]}: error: ") and message in lines[-1], err
    assert "Traceback" not in err and (len(lines) == 1 or lines[0].startswith("usage:")), err
    assert not os.path.exists(tmp_path / "W")  # nothing ran


@pytest.mark.parametrize("command", ["eval", "train", "compile", "demo"])
def test_help_explains_overrides(command, capsys):
    code, out, _ = _main([command, "--help"], capsys)
    assert code == 0
    for text in ("--config.FIELD=VALUE", "FILE[:ARG]", "--print-config", "Any field the config declares",
                 "example:", f"prd-jax {command} "):
        assert text in out, (command, text)
