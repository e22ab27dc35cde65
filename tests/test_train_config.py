"""`TrainConfig` (prd_jax/train/config.py): every training config validates into it once, the
split and data dir are spelled as in an eval config, and bad input names the field and what is
allowed (issue 49 §6)."""

from __future__ import annotations

import dataclasses
import glob
import os
import re
import runpy

import pytest

from prd_jax import demo
from prd_jax.config_check import load
from prd_jax.config_fields import declared
from prd_jax.config_io import apply_overrides, load_config
from prd_jax.eval_config import EvalConfig
from prd_jax.train.config import DataSettings, ModelInit, TrainConfig, describe
from prd_jax.train.setup import rl_problems

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SFT_TINY = os.path.join(ROOT, "configs", "sft", "tiny.py")
RL_TINY = os.path.join(ROOT, "configs", "rl", "tiny.py")
SFT_GSM8K = os.path.join(ROOT, "configs", "sft", "tiny_gsm8k.py")


def _specs() -> list:
    """Every training config file, with each arg it declares (`ARGS`: a paper-scale config's pods)."""
    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "configs", "sft", "*.py"))
                       + glob.glob(os.path.join(ROOT, "configs", "rl", "*.py"))):
        args = runpy.run_path(path).get("ARGS", (None,))
        out += [path if arg is None else f"{path}:{arg}" for arg in args]
    return out


@pytest.mark.parametrize("spec", _specs(), ids=lambda s: os.path.relpath(s, ROOT))
def test_every_training_config_validates_into_train_config(spec):
    tc = TrainConfig.from_config(load(spec))
    assert tc.stage == ("sft" if "/sft/" in spec else "rl")
    assert (tc.rl is not None) == (tc.stage == "rl")
    assert tc.split in ("train", "test") and isinstance(tc.data_dir, str)
    assert TrainConfig.from_config(tc) is tc  # a typed config passes through: validated once


def test_the_demo_stage_configs_validate():
    stages = demo.stage_configs(load(os.path.join(ROOT, "configs", "demo.py")), "demo_workdir")
    typed = {name: TrainConfig.from_config(c) for name, c in stages.items()}
    assert {n: t.stage for n, t in typed.items()} == {"sft": "sft", "rl_baseline": "rl", "rl_pdr": "rl"}
    assert typed["rl_pdr"].rl.operator_fraction > 0 == typed["rl_baseline"].rl.operator_fraction


def test_split_and_data_dir_are_spelled_as_in_an_eval_config():
    train, evaluation = TrainConfig.__dataclass_fields__, EvalConfig.__dataclass_fields__
    assert {"split", "data_dir", "task", "seed", "mesh", "target"} <= set(train) & set(evaluation)
    tc = TrainConfig.from_config(apply_overrides(load_config(SFT_GSM8K), ["--config.split=test",
                                                                          "--config.data_dir=/x/data"]))
    assert (tc.split, tc.data_dir, tc.data_dir_or_none) == ("test", "/x/data", "/x/data")
    assert TrainConfig.from_config(load_config(SFT_GSM8K)).data_dir_or_none is None


@pytest.mark.parametrize("old,new", [("task_split", "split"), ("data.split", "split"),
                                     ("data.data_dir", "data_dir")])
def test_the_old_spellings_are_refused_naming_the_new_field(old, new):
    message = rf"config\.{re.escape(old)} moved to config\.{new} \(one spelling for eval and training configs\)"
    with pytest.raises(ValueError, match=message) as info:
        apply_overrides(load_config(RL_TINY), [f"--config.{old}=train"])
    assert "\n" not in str(info.value)
    config = load_config(RL_TINY)
    parent, _, leaf = old.rpartition(".")
    (config[parent] if parent else config)[leaf] = "train"  # a config file that still sets it
    with pytest.raises(ValueError, match=message):
        TrainConfig.from_config(config)


class RecordingTask:
    """A task that records the (split, data_dir) each read asks for."""

    name = "recording"

    def __init__(self):
        self.asked = []

    def problems(self, split, limit=None, data_dir=None):
        self.asked.append((split, data_dir, limit))
        return [{"id": "0", "problem": "1+1", "answer": "2"}]

    def problem_text(self, row):
        return row["problem"]

    def gold_key(self, row):
        return row["answer"]


def test_split_data_dir_and_num_train_reach_the_rl_read():
    task = RecordingTask()
    config = apply_overrides(load_config(RL_TINY), ["--config.split=test", "--config.data_dir=/d",
                                                   "--config.data.num_train=7"])
    rl_problems(config, task)
    rl_problems(load_config(RL_TINY), task)
    assert task.asked == [("test", "/d", 7), ("train", None, 512)]


@pytest.mark.parametrize("override,message", [
    ("--config.stage=dpo", r"config\.stage='dpo'; allowed: \('sft', 'rl'\)"),
    ("--config.tokenizer=bpe", r"config\.tokenizer='bpe'; allowed: \('char', 'model'\)"),
    ("--config.model.init=scratch", r"config\.model\.init='scratch'; allowed: \('random', 'pretrained', 'checkpoint'\)"),
    ("--config.data.mode=stack", r"config\.data\.mode='stack'; allowed: \('pack', 'pad'\)"),
    ("--config.batch_size=0", r"config\.batch_size=0; must be an integer >= 1"),
    ("--config.eval_every=-1", r"config\.eval_every=-1; must be >= 0"),
    ("--config.data.validation_fraction=1.0", r"config\.data\.validation_fraction=1\.0; allowed: \[0, 1\)"),
    ("--config.data.templates=fancy", r"config\.data\.templates='fancy'; allowed: \["),
    ("--config.data.ranking=best", r"config\.data\.ranking='best'; allowed: None or one of \('random', 'majority'\)"),
    ("--config.task=nope", r"config\.task='nope'; allowed: \["),
    ("--config.model.name=gpt5", r"config\.model\.name='gpt5'; allowed: \["),
    ("--config.continual=True", r"config\.continual=True needs config\.model\.init='checkpoint' \(got 'random'\)"),
])
def test_bad_sft_values_name_the_field_and_what_is_allowed(override, message):
    with pytest.raises(ValueError, match=message) as info:
        TrainConfig.from_config(apply_overrides(load_config(SFT_TINY), [override]))
    assert "\n" not in str(info.value)


def test_bad_types_and_keys_name_the_field():
    config = load_config(SFT_TINY)
    config.seed = True
    with pytest.raises(ValueError, match=r"config\.seed=True; must be int"):
        TrainConfig.from_config(config)
    config = load_config(SFT_TINY)
    del config.data["num_train"]
    config.data.num_train = "3"
    with pytest.raises(ValueError, match=r"config\.data\.num_train='3'; must be int"):
        TrainConfig.from_config(config)
    config = load_config(SFT_TINY)
    config.data.seq_lenght = 3
    with pytest.raises(ValueError, match=r"config\.data: unknown keys \['seq_lenght'\]; allowed: \[.*'seq_len'"):
        TrainConfig.from_config(config)
    config = load_config(SFT_TINY)
    config.sampling = {"temperature": 0.5}
    with pytest.raises(ValueError, match=r"config\.sampling is set but config\.rl is not; only RL samples"):
        TrainConfig.from_config(config)
    config = load_config(SFT_TINY)
    config.stage = "rl"  # no config.rl
    with pytest.raises(ValueError, match=r"config\.stage='rl' needs config\.rl"):
        TrainConfig.from_config(config)
    config = load_config(RL_TINY)
    config.grad_accum_steps, config.rl.minibatches = 3, 2
    with pytest.raises(ValueError, match=r"config\.rl\.minibatches=2 must divide config\.grad_accum_steps=3"):
        TrainConfig.from_config(config)
    config = load_config(SFT_TINY)
    del config.data["seq_len"]
    with pytest.raises(ValueError, match=r"config\.data\.seq_len=0; SFT needs an integer >= 1"):
        TrainConfig.from_config(config)


def test_an_int_is_taken_for_a_float_field():
    tc = TrainConfig.from_config(apply_overrides(load_config(SFT_TINY), ["--config.data.pdr_fraction=1"]))
    assert tc.data.pdr_fraction == 1.0 and isinstance(tc.data.pdr_fraction, float)


def test_every_field_has_a_one_line_description_and_is_declared():
    docs = describe()
    own = {f"{p}{f.name}" for p, cls in (("", TrainConfig), ("model.", ModelInit), ("data.", DataSettings))
           for f in dataclasses.fields(cls)}
    assert set(docs) == own
    assert all(d and "\n" not in d and len(d) < 120 for d in docs.values()), docs
    schema = declared(load_config(RL_TINY), "train")
    groups = {"model", "data", "optim", "rl", "wandb", "rollout", "model.overrides"}
    assert own - groups <= set(schema)  # every field an override may set, with its description
    assert {"rollout.mesh", "rollout.placement", "rollout.sample_devices"} <= set(schema)
    assert schema["split"].doc == docs["split"] and schema["data.seq_len"].default == 0
