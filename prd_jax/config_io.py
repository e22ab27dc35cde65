"""Load `ml_collections` config files (`get_config(arg)`) and apply `--config.x=v` overrides.

docs/design.md principle 6: configs are Python files; `path.py:arg` passes `arg` to
`get_config`. Override values are parsed as Python literals when possible and must keep
the type of the field they replace.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
from typing import Sequence

from prd_jax import fileio
from prd_jax.host import is_main

PREFIX = "--config."

# Keys that moved: old dotted name -> new one. The sampler's settings live in one
# `config.sampling` sub-config (`prd_jax.sampling.Sampling`), read by eval and RL alike.
_SAMPLING_MOVES = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k",
                   "max_rows_per_call": "max_rows", "compact_min_rows": "compact_min_rows",
                   "compact_ratio": "compact_ratio", "prefill_groups": "prefill_groups",
                   "cache_window": "cache_window", "prompt_groups": "prompt_groups",
                   "decode_layers": "decode_layers"}
MOVED = {**{old: f"sampling.{new}" for old, new in _SAMPLING_MOVES.items()},
         **{f"rl.{old}": f"sampling.{new}" for old, new in _SAMPLING_MOVES.items()}}


def moved(dotted: str, new: str) -> str:
    """The error text for a key that moved."""
    return (f"config.{dotted} moved to config.{new} (one sampling config for eval and RL, "
            f"prd_jax.sampling.Sampling): use --config.{new}=... or set c.{new} in the config file")


def check_moved(config, keys=None) -> None:
    """Raise, naming the new field, when `config` (a ConfigDict or dict) still holds a key
    that moved (`MOVED`). `keys` limits the check to those old dotted names."""
    for old, new in MOVED.items():
        if keys is not None and old not in keys:
            continue
        *parents, leaf = old.split(".")
        node = config
        for name in parents:
            node = node.get(name) if hasattr(node, "get") else None
        if hasattr(node, "keys") and leaf in node.keys():
            raise ValueError(moved(old, new))


def load_config(spec: str):
    """`configs/eval/x.py` or `configs/eval/x.py:arg` -> ConfigDict."""
    path, _, arg = spec.partition(":")
    if not os.path.exists(path):
        raise FileNotFoundError(f"config file {path!r} does not exist")
    module_spec = importlib.util.spec_from_file_location("prd_config", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    if not hasattr(module, "get_config"):
        raise ValueError(f"config file {path!r} defines no get_config(arg=None)")
    return module.get_config(arg or None)


def apply_overrides(config, overrides: Sequence[str]):
    """Apply `--config.a.b=value` strings in order; unknown fields raise naming the field."""
    for item in overrides:
        if not item.startswith(PREFIX) or "=" not in item:
            raise ValueError(f"override {item!r}: expected --config.FIELD=VALUE")
        dotted, raw = item[len(PREFIX):].split("=", 1)
        if dotted in MOVED:
            raise ValueError(f"override {item!r}: " + moved(dotted, MOVED[dotted]))
        *parents, leaf = dotted.split(".")
        node = config
        for name in parents:
            if name not in node:
                raise ValueError(f"override {item!r}: config has no field {name!r}")
            node = node[name]
        if leaf not in node:
            raise ValueError(f"override {item!r}: config has no field {dotted!r}; fields: {sorted(node.keys())}")
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = raw
        current = node[leaf]
        if isinstance(current, bool) and not isinstance(value, bool):
            raise ValueError(f"--config.{dotted}: expected True/False, got {raw!r}")
        if isinstance(current, float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if isinstance(current, str) and not isinstance(value, str):
            value = raw
        if current is not None and type(value) is not type(current) and not (
                isinstance(current, (list, tuple)) and isinstance(value, (list, tuple))):
            raise ValueError(f"--config.{dotted}={raw!r}: expected {type(current).__name__}")
        node[leaf] = value
    return config


def save_config(config, workdir: str) -> None:
    """`workdir/config.json`: the resolved config (principle 6), written by process 0 through
    `prd_jax.fileio` (local path or gs://)."""
    if is_main():
        fileio.write_text(os.path.join(workdir, "config.json"),
                          config.to_json_best_effort(indent=2) if hasattr(config, "to_json_best_effort")
                          else json.dumps(dict(config), indent=2, default=str))
