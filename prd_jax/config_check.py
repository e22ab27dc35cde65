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
from prd_jax.config_schema import default, kind_of
from prd_jax.model.config import NAMED_CONFIGS
from prd_jax.tasks import task_for_config
from prd_jax.tracking import WandbConfig, check_loggers
from prd_jax.train.optim import OptimConfig
from prd_jax.train.rl import RLConfig
from prd_jax.train.run import STAGES
from prd_jax.train.setup import INITS, TOKENIZERS, model_overrides


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
    """Validate a training config as `prd-jax train` reads it, loading no model and no data:
    stage, init, tokenizer, the task's name (unless SFT reads `data.mixture` or `data.path`),
    `ModelConfig` (named model + overrides),
    `OptimConfig`, `loggers` and `wandb` (`prd_jax.tracking`) and, for RL, `RLConfig`. Raises
    ValueError naming the field."""
    check_loggers(config.get("loggers", default("loggers")))
    WandbConfig.from_config(config.get("wandb"))
    if config.get("stage") not in STAGES:
        raise ValueError(f"config.stage={config.get('stage')!r}; allowed: {STAGES}")
    if config.model.get("init") not in INITS:
        raise ValueError(f"config.model.init={config.model.get('init')!r}; allowed: {INITS}")
    if config.get("tokenizer") not in TOKENIZERS:
        raise ValueError(f"config.tokenizer={config.get('tokenizer')!r}; allowed: {TOKENIZERS}")
    if config.model.name in NAMED_CONFIGS:
        try:
            NAMED_CONFIGS[config.model.name].replace(**model_overrides(config))
        except TypeError as e:  # an override that is no ModelConfig field
            raise ValueError(f"config.model.overrides: {e}") from None
    elif config.model.init != "pretrained" or not config.model.get("path"):
        raise ValueError(f"config.model.name={config.model.name!r}; allowed: {sorted(NAMED_CONFIGS)}")
    optim = config.optim.to_dict() if hasattr(config.optim, "to_dict") else dict(config.optim)
    try:
        OptimConfig(**optim)
    except TypeError as e:
        raise ValueError(f"config.optim: {e}") from None
    data = config.get("data") or {}
    if config.stage == "rl" or not (data.get("mixture") or data.get("path")):  # SFT on a seqio task or traces: no task
        task_for_config(config)
    if config.stage == "rl":
        rl, accum = RLConfig.from_config(config), config.get("grad_accum_steps", default("grad_accum_steps"))
        if accum % rl.minibatches:  # RLStage's check, before any model loads
            raise ValueError(f"config.rl.minibatches={rl.minibatches} must divide config.grad_accum_steps={accum} "
                             "(a mini-batch is a whole number of microbatches)")
