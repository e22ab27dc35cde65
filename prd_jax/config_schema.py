"""What a config may hold: field types, defaults and conversions (the bottom layer).

This module declares `Field`, `dataclass_fields` (a dataclass as fields, with each field's
one-line description), `convert` (the text of `--config.x=v` as a declared type) and `MOVED`
(keys that moved, with the message naming the new place).

The layers above, each imported at module level, with no cycle:
- `config_fields.declared`: every field of an eval config (`EvalConfig`, `sampling.*` from
  `Sampling`, `backend.*` from `BackendConfig`) or a train config (`train.config.TrainConfig`:
  the run and loop settings, `model.*`, `data.*`, `wandb.*`; `model.overrides.*` from
  `ModelConfig` with the named model's values as defaults, `optim.*` from `OptimConfig`; RL adds `rl.*` from `RLConfig`, `rl.operator.*` from the spec of the
  operator `rl.operator.type` names, and `sampling.*`). The demo declares its own fields
  (`demo.declared_fields`: the file's, typed by value or by `demo.PRESETS`; `adaptive.*` by
  `AdaptivePDR`).
- `config_io.apply_overrides`: sets any declared field, listed in the file or not.
- `config_check`: the config a command runs, validated before any model loads, and
  `--print-config`.
"""

from __future__ import annotations

import ast
import dataclasses
import typing
from typing import Any, Optional

KINDS = ("eval", "train", "demo")


class _Required:
    def __repr__(self):
        return "REQUIRED"


REQUIRED = _Required()  # a field with no default: the config file must set it


@dataclasses.dataclass(frozen=True)
class Field:
    """A declared field: its type annotation, its default (or REQUIRED), who declares it and
    its one-line description (the dataclass field's `metadata["doc"]`, where it has one)."""

    type: Any
    default: Any = REQUIRED
    source: str = ""
    doc: str = ""


def dataclass_fields(cls, prefix: str, keep=None, skip=(), defaults=None) -> dict:
    """{prefix.name: Field} of a dataclass's fields (nested dataclass fields recursed), typed
    by its annotations; `keep` / `skip` filter the names, `defaults` replaces the defaults."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        if f.name in skip or (keep is not None and f.name not in keep):
            continue
        tp = hints[f.name]
        if f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        else:
            value = REQUIRED
        if defaults is not None and f.name in defaults:
            value = defaults[f.name]
        path = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(tp):
            out.update(dataclass_fields(tp, path + ".", defaults=None if value is REQUIRED else
                                        {g.name: getattr(value, g.name) for g in dataclasses.fields(tp)}))
        else:
            out[path] = Field(tp, value, cls.__name__, f.metadata.get("doc", ""))
    return out


def kind_of(config) -> Optional[str]:
    """"demo" (a config with `quick_overrides`, as configs/demo.py), "eval" (with
    `operators`), "train" (with `stage`), else None."""
    if "quick_overrides" in config:
        return "demo"
    if "operators" in config:
        return "eval"
    if "stage" in config:
        return "train"
    return None


def value_at(config, dotted: str, fallback=None):
    """The value at `dotted` in a ConfigDict (or dict), or `fallback` when a part is absent."""
    node = config
    for name in dotted.split("."):
        if not hasattr(node, "keys") or name not in node.keys():
            return fallback
        node = node[name]
    return node


def leaves(config, prefix: str = "") -> dict:
    """{dotted path: value} of a ConfigDict's (or dict's) leaves; lists are leaves."""
    out = {}
    for name in config.keys():
        value = config[name]
        if hasattr(value, "keys"):
            out.update(leaves(value, f"{prefix}{name}."))
        else:
            out[f"{prefix}{name}"] = value
    return out


def type_name(tp) -> str:
    """'int', 'Optional[float]', 'tuple', 'any value' ..."""
    if tp is Any:
        return "any value"
    if typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        inner = " | ".join(type_name(a) for a in args)
        return f"Optional[{inner}] (None or {inner})"
    return getattr(tp, "__name__", str(tp))


def literal(raw: str):
    """`raw` as a Python literal when it parses as one, else the string itself."""
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return raw


_NO = object()


def _convert(value, raw: str, tp):
    """`value` (parsed from `raw`) as type `tp`, or _NO when it is not one."""
    if tp is Any or tp is object:
        return value
    origin = typing.get_origin(tp)
    if origin is typing.Union:
        if value is None:
            return None if type(None) in typing.get_args(tp) else _NO
        for arg in (a for a in typing.get_args(tp) if a is not type(None)):
            out = _convert(value, raw, arg)
            if out is not _NO:
                return out
        return _NO
    if tp is bool:
        if isinstance(value, bool):
            return value
        return {"true": True, "false": False}.get(raw.strip().lower(), _NO)
    if tp is int:
        return value if isinstance(value, int) and not isinstance(value, bool) else _NO
    if tp is float:
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else _NO
    if tp is str:
        return value if isinstance(value, str) else raw
    if tp is tuple or origin is tuple:
        if not isinstance(value, (list, tuple)):
            return _NO
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            items = [_convert(v, repr(v), args[0]) for v in value]
            return _NO if any(v is _NO for v in items) else tuple(items)
        return tuple(value)
    if tp is list:
        return list(value) if isinstance(value, (list, tuple)) else _NO
    if tp is dict:
        return value if isinstance(value, dict) else _NO
    return value if isinstance(tp, type) and isinstance(value, tp) else _NO


def convert(dotted: str, raw: str, tp, source: str = ""):
    """`raw` (the text after `=`) as the declared type `tp` of `config.<dotted>`: bool
    (True/False), int, float (ints accepted), str (taken as written), tuple (a literal list
    or tuple), Optional[X] (None or X), Any (a literal, else the text). Raises naming the
    field and the expected type."""
    out = _convert(literal(raw), raw, tp)
    if out is _NO:
        where = f" (declared by {source})" if source else ""
        raise ValueError(f"--config.{dotted}={raw!r}: expected {type_name(tp)}{where}")
    return out


# Keys that moved: old dotted name -> new one. The sampler's settings live in one
# `config.sampling` sub-config (`prd_jax.sampling.Sampling`), read by eval and RL alike.
_SAMPLING_MOVES = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k",
                   "max_rows_per_call": "max_rows", "compact_min_rows": "compact_min_rows",
                   "compact_ratio": "compact_ratio", "prefill_groups": "prefill_groups",
                   "cache_window": "cache_window", "prompt_groups": "prompt_groups",
                   "decode_layers": "decode_layers"}
# The problems' split and data dir of a training config are spelled as an eval config's
# (`train.config.TrainConfig`, docs/training.md).
_DATA_MOVES = {"task_split": "split", "data.split": "split", "data.data_dir": "data_dir"}
MOVED = {**{old: f"sampling.{new}" for old, new in _SAMPLING_MOVES.items()},
         **{f"rl.{old}": f"sampling.{new}" for old, new in _SAMPLING_MOVES.items()}, **_DATA_MOVES}


def moved(dotted: str, new: str) -> str:
    """The error text (one line) for a key that moved."""
    why = ("one spelling for eval and training configs" if dotted in _DATA_MOVES
           else "one sampling config for eval and RL, prd_jax.sampling.Sampling")
    return (f"config.{dotted} moved to config.{new} ({why}): use --config.{new}=... or set c.{new} in the "
            "config file")


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


def group_from_raw(cls, raw, group: str):
    """The frozen dataclass `cls` of `config.<group>` from a dict, ConfigDict, `cls` or None
    (defaults); unknown keys raise one line naming the allowed fields."""
    if raw is None or isinstance(raw, cls):
        return raw or cls()
    raw = raw.to_dict() if hasattr(raw, "to_dict") else dict(raw)
    allowed = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(raw) - set(allowed))
    if unknown:
        raise ValueError(f"config.{group}: unknown keys {unknown}; allowed: {allowed}")
    return cls(**raw)


def doc_field(doc: str, default: Any = dataclasses.MISSING, factory: Any = dataclasses.MISSING):
    """A dataclass field with its one-line description (`metadata["doc"]`, `Field.doc`)."""
    return dataclasses.field(default=default, default_factory=factory, metadata={"doc": doc})
