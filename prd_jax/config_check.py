"""What a command checks before it loads a model: the config a command runs (`load`), its
typed validation (`validate`) and `--print-config`'s JSON (`to_json`). Used by the command line
and by the documented-commands test.
"""

from __future__ import annotations

import json
from typing import Optional

from prd_jax import demo
from prd_jax.backends.config import with_backend
from prd_jax.config_fields import declared, resolved
from prd_jax.config_io import apply_overrides, load_config
from prd_jax.eval_config import EvalConfig
from prd_jax.config_schema import kind_of
from prd_jax.train.config import TrainConfig


def fields(config, kind: Optional[str] = None) -> dict:
    """{dotted path: Field} a config declares, whatever its kind (`config_fields.declared`, or
    the demo's own `demo.declared_fields`)."""
    if (kind or kind_of(config)) == "demo":
        return demo.declared_fields(config)
    return declared(config, kind)


def load(spec: str, overrides=(), kind: Optional[str] = None):
    """The config a command runs: `config_io.load_config(spec)`, an eval config's backend
    defaults (`backends.config.with_backend`), then the overrides."""
    config = load_config(spec)
    kind = kind or kind_of(config)
    if kind == "eval":
        config = with_backend(config)
    if kind == "demo":
        return apply_overrides(config, list(overrides), declare=demo.declared_fields)
    return apply_overrides(config, list(overrides), kind)


def validate(config, kind: Optional[str] = None) -> None:
    """The typed validation a command does before it loads a model: `EvalConfig.from_config`
    (eval), `check_train_config` (train), the demo's stage and eval configs (demo)."""
    kind = kind or kind_of(config)
    if kind == "eval":
        EvalConfig.from_config(config)
    elif kind == "train":
        check_train_config(config)
    elif kind == "demo":
        for stage in demo.stage_configs(config, "demo_workdir").values():
            check_train_config(stage)
        EvalConfig.from_config(demo.eval_config(config))
    else:
        raise ValueError("config has neither `operators` (an eval config) nor `stage` (a training config)")


def to_json(config, kind: Optional[str] = None) -> str:
    """`--print-config`: the resolved config (`resolved`) as indented JSON, keys sorted."""
    return json.dumps(resolved(config, kind).to_dict(), indent=2, sort_keys=True, default=repr)


def check_train_config(config) -> None:
    """Validate a training config as `prd-jax train` reads it, loading no model and no data
    (`train.config.TrainConfig.from_config`: stage, init, tokenizer, the task, `ModelConfig`
    overrides, `OptimConfig`, loggers, `wandb` and, for RL, `RLConfig`). Raises ValueError naming
    the field."""
    TrainConfig.from_config(config)
