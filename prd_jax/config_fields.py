"""Which fields each kind of config declares: eval (`EvalConfig`, `sampling.*`, `backend.*`)
and train (`train.config.TrainConfig`, `model.overrides.*`, `optim.*`, and for RL `rl.*`,
`rl.operator.*` and `sampling.*`), each derived from its dataclass (`config_schema`'s module
docstring has the whole list). The demo declares its own (`demo.declared_fields`).

`config_io.apply_overrides` sets any field declared here; `--print-config` prints them all
(`resolved`).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import ml_collections

from prd_jax.backends.config import BackendConfig
from prd_jax.config_schema import KINDS, REQUIRED, Field, dataclass_fields, kind_of, value_at
from prd_jax.eval_config import EvalConfig
from prd_jax.model.config import NAMED_CONFIGS, ModelConfig
from prd_jax.operators.call_budget import CallBudget, budget_names
from prd_jax.operators.registry import get_operator
from prd_jax.sampling import CONFIG_KEYS, Sampling
from prd_jax.train.config import TrainConfig
from prd_jax.train.rl_config import RLConfig


def _sampling_fields() -> dict:
    return dataclass_fields(Sampling, "sampling.", keep=CONFIG_KEYS)


def _eval_fields(config) -> dict:
    return {**dataclass_fields(EvalConfig, "", skip=("sampling", "backend")), **_sampling_fields(),
            **dataclass_fields(BackendConfig, "backend.")}


def _train_fields(config) -> dict:
    """`TrainConfig`'s fields (`optim.*` and `wandb.*` recursed), `model.overrides.*` from
    `ModelConfig`; RL adds `rl.*`, `sampling.*` and the RL operator's `rl.operator.*`."""
    out = dataclass_fields(TrainConfig, "", skip=("rl",))
    del out["model.overrides"]
    named = NAMED_CONFIGS.get(value_at(config, "model.name"))
    out.update(dataclass_fields(ModelConfig, "model.overrides.", defaults=None if named is None else {
        f.name: getattr(named, f.name) for f in dataclasses.fields(ModelConfig)}))
    if value_at(config, "stage") == "rl":
        out.update(dataclass_fields(RLConfig, "rl.", skip=("sampling",)))
        out.update(_sampling_fields())
        op_type = value_at(config, "rl.operator.type") or "pdr"
        try:
            spec = get_operator(op_type).spec
        except (KeyError, ValueError):
            spec = None  # an unknown type: RLConfig's validation names the operators allowed
        if spec is not None:
            out["rl.operator.type"] = Field(str, "pdr", "RLConfig.operator")
            out.update(dataclass_fields(spec, "rl.operator.", skip=("budget",)))
            # the call budget's fields flat, as configs write them (rl.operator.max_new_tokens)
            out.update(dataclass_fields(CallBudget, "rl.operator.", keep=budget_names(spec)))
    return out


def declared(config, kind: Optional[str] = None) -> dict:
    """{dotted path: Field} of every field `config` may hold (`kind`: "eval" or "train";
    None: `kind_of(config)`; the demo's: `demo.declared_fields`). Depends on the config's
    current values: the stage, the named model (defaults of `model.overrides.*`) and the RL
    operator's type."""
    kind = kind or kind_of(config)
    if kind is None:
        return {}
    if kind not in KINDS:
        raise ValueError(f"config kind {kind!r}; allowed: {KINDS}")
    if kind == "demo":
        raise ValueError("the demo config declares its own fields: pass declare=demo.declared_fields")
    return {"eval": _eval_fields, "train": _train_fields}[kind](config)


def resolved(config, kind: Optional[str] = None, declare: Optional[Callable] = None):
    """A copy of `config` with every declared field it leaves out added at its default
    (fields without a default stay out; a sub-config set to None, such as `rl.operator`
    when operator RL is off, stays None): what `--print-config` prints. `declare`: the
    function that lists the fields (default `declared`)."""
    out = ml_collections.ConfigDict(config.to_dict() if hasattr(config, "to_dict") else dict(config))
    for dotted, field in sorted((declare or (lambda c: declared(c, kind)))(out).items()):
        if field.default is REQUIRED:
            continue
        *parents, leaf = dotted.split(".")
        node = out
        for name in parents:
            if name not in node.keys():
                node[name] = ml_collections.ConfigDict()
            node = node[name]
            if not hasattr(node, "keys"):  # None (off) or a value: nothing to fill below it
                break
        if hasattr(node, "keys") and leaf not in node.keys():
            node[leaf] = field.default
    return out
