"""What a config may hold: for each dotted path, the declared type and default.

One schema serves `--config.x=v` (`config_io.apply_overrides`), `--print-config` and the
raw reads of the training code. It is derived from the typed configs wherever one exists:

- eval configs (they have `operators`): `EvalConfig`'s fields, `sampling.*` (`Sampling`)
  and `backend.*` (`BackendConfig`);
- train configs (they have `stage`): `TRAIN_TABLE` below for the fields no dataclass holds
  (top-level loop settings, `model.*`, `data.*`), `model.overrides.*` (`ModelConfig`, with
  the named model's values as defaults), `optim.*` (`OptimConfig`); RL stages add `rl.*`
  (`RLConfig`), `rl.operator.*` (the spec of the operator `rl.operator.type` names) and
  `sampling.*`. SFT trace fractions come from `data.synthetic.sft_traces`' keywords and the
  preimage draft knobs from `data.preimage.TRACE_DEFAULTS`;
- the demo config (`configs/demo.py`): the file's own fields, typed by their values or, where
  None (the task's preset), by `demo.PRESETS`; and `adaptive.*`, typed by `AdaptivePDR`.

A field the config file leaves out can still be set: it is inserted, converted to its
declared type. The training code reads the table's fields through `default(path)`, so the
defaults printed by `--print-config` are the ones a run uses.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import typing
from typing import Any, Optional

KINDS = ("eval", "train", "demo")


class _Required:
    def __repr__(self):
        return "REQUIRED"


REQUIRED = _Required()  # a field with no default: the config file must set it


@dataclasses.dataclass(frozen=True)
class Field:
    """A declared field: its type annotation, its default (or REQUIRED) and who declares it."""

    type: Any
    default: Any = REQUIRED
    source: str = ""


# Fields of a train config that no dataclass declares: the loop's settings (`trainer.fit`),
# the model and tokenizer (`setup.build_model`) and the data (`setup`, `sft.SFTStage`).
TRAIN_TABLE = {
    "stage": Field(str), "seed": Field(int), "task": Field(str),
    "task_split": Field(str, "train"),  # RL's split of the task (with data.mixture: data.split)
    "tokenizer": Field(str), "mesh": Field(str, ""), "target": Field(str, ""), "continual": Field(bool, False),
    "batch_size": Field(int), "grad_accum_steps": Field(int, 1), "steps": Field(int),
    "checkpoint_every": Field(int), "keep_checkpoints": Field(int), "eval_every": Field(int, 0),
    "max_nonfinite_steps": Field(int, 5),
    "model.name": Field(str), "model.path": Field(str, ""), "model.init": Field(str),
    "model.init_workdir": Field(str, ""),
    "data.difficulty": Field(Optional[tuple], None), "data.num_train": Field(int, 0), "data.num_eval": Field(int, 0),
    "data.seq_len": Field(int), "data.mode": Field(str, "pack"), "data.path": Field(str, ""),
    "data.validation_fraction": Field(float, 0.05), "data.mixture": Field(str, ""), "data.module": Field(str, ""),
    "data.data_dir": Field(str, ""), "data.split": Field(str, "train"), "data.eval_split": Field(str, "validation"),
}
TRAIN_TABLE = {k: dataclasses.replace(v, source="config_schema.TRAIN_TABLE") for k, v in TRAIN_TABLE.items()}


def default(dotted: str):
    """The declared default of a train-config field (`train_fields`) the code reads raw."""
    field = train_fields()[dotted]
    if field.default is REQUIRED:
        raise KeyError(f"config.{dotted} has no default")
    return field.default


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
            out[path] = Field(tp, value, cls.__name__)
    return out


@functools.lru_cache(maxsize=None)
def train_fields() -> dict:
    """`TRAIN_TABLE` plus the SFT trace knobs, each typed by its default."""
    from prd_jax.data import preimage, synthetic

    out = dict(TRAIN_TABLE)
    hints = typing.get_type_hints(synthetic.sft_traces)
    for name, p in inspect.signature(synthetic.sft_traces).parameters.items():
        if p.kind is p.KEYWORD_ONLY:
            out[f"data.{name}"] = Field(hints.get(name, type(p.default)), p.default, "data.synthetic.sft_traces")
    for name, value in preimage.TRACE_DEFAULTS.items():  # None: the preimage family's default
        out[f"data.{name}"] = Field(Optional[type(value)], None, "data.preimage.TRACE_DEFAULTS")
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


def _sampling_fields() -> dict:
    from prd_jax.sampling import CONFIG_KEYS, Sampling

    return dataclass_fields(Sampling, "sampling.", keep=CONFIG_KEYS)


def _eval_fields(config) -> dict:
    from prd_jax.backends.config import BackendConfig
    from prd_jax.eval_config import EvalConfig

    return {**dataclass_fields(EvalConfig, "", skip=("sampling", "backend")), **_sampling_fields(),
            **dataclass_fields(BackendConfig, "backend.")}


def _train_fields(config) -> dict:
    from prd_jax.model.config import NAMED_CONFIGS, ModelConfig
    from prd_jax.train.optim import OptimConfig

    out = dict(train_fields())
    named = NAMED_CONFIGS.get(value_at(config, "model.name"))
    out.update(dataclass_fields(ModelConfig, "model.overrides.", defaults=None if named is None else {
        f.name: getattr(named, f.name) for f in dataclasses.fields(ModelConfig)}))
    out.update(dataclass_fields(OptimConfig, "optim."))
    if value_at(config, "stage") == "rl":
        from prd_jax.operators.registry import get_operator
        from prd_jax.train.rl import RLConfig

        out.update(dataclass_fields(RLConfig, "rl.", skip=("sampling",)))
        out.update(_sampling_fields())
        op_type = value_at(config, "rl.operator.type") or "pdr"
        try:
            spec = get_operator(op_type).spec
        except (KeyError, ValueError):
            spec = None  # an unknown type: RLConfig's validation names the operators allowed
        if spec is not None:
            out["rl.operator.type"] = Field(str, "pdr", "RLConfig.operator")
            out.update(dataclass_fields(spec, "rl.operator."))
    return out


def _demo_fields(config) -> dict:
    from prd_jax.demo import PRESETS
    from prd_jax.operators.adaptive_pdr import AdaptivePDR

    preset = next(iter(PRESETS.values()))
    out = {}
    for name, value in leaves(config).items():  # the file declares its fields; None: the task's preset
        if value is None and name in preset and not isinstance(preset[name], dict):
            out[name] = Field(Optional[type(preset[name])], None, "demo.PRESETS")
        elif value is not None and not name.startswith("adaptive."):
            out[name] = Field(tuple if isinstance(value, (list, tuple)) else type(value), value, "the demo config")
    out["adaptive"] = Field(Optional[dict], None, "demo.PRESETS")  # None: the preset; or set field by field
    out.update({k: Field(Optional[f.type], None, f.source) for k, f in
                dataclass_fields(AdaptivePDR, "adaptive.", keep=tuple(preset["adaptive"])).items()})
    return out


def declared(config, kind: Optional[str] = None) -> dict:
    """{dotted path: Field} of every field `config` may hold (`kind`: "eval", "train",
    "demo"; None: `kind_of(config)`). Depends on the config's current values: the stage, the
    named model (defaults of `model.overrides.*`) and the RL operator's type."""
    kind = kind or kind_of(config)
    if kind is None:
        return {}
    if kind not in KINDS:
        raise ValueError(f"config kind {kind!r}; allowed: {KINDS}")
    return {"eval": _eval_fields, "train": _train_fields, "demo": _demo_fields}[kind](config)


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


def resolved(config, kind: Optional[str] = None):
    """A copy of `config` with every declared field it leaves out added at its default
    (fields without a default stay out; a sub-config set to None, such as `rl.operator`
    when operator RL is off, stays None): what `--print-config` prints."""
    import ml_collections

    out = ml_collections.ConfigDict(config.to_dict() if hasattr(config, "to_dict") else dict(config))
    for dotted, field in sorted(declared(out, kind).items()):
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


def load(spec: str, overrides=(), kind: Optional[str] = None):
    """The config a command runs: `config_io.load_config(spec)`, an eval config's backend
    defaults (`backends.config.with_backend`), then the overrides."""
    from prd_jax.config_io import apply_overrides, load_config

    config = load_config(spec)
    if (kind or kind_of(config)) == "eval":
        from prd_jax.backends.config import with_backend

        config = with_backend(config)
    return apply_overrides(config, list(overrides), kind)


def validate(config, kind: Optional[str] = None) -> None:
    """The typed validation a command does before it loads a model: `EvalConfig.from_config`
    (eval), `train.setup.check_config` (train), the demo's stage and eval configs (demo)."""
    kind = kind or kind_of(config)
    if kind == "eval":
        from prd_jax.eval_config import EvalConfig

        EvalConfig.from_config(config)
    elif kind == "train":
        from prd_jax.train.setup import check_config

        check_config(config)
    elif kind == "demo":
        from prd_jax.demo import eval_config, stage_configs
        from prd_jax.eval_config import EvalConfig
        from prd_jax.train.setup import check_config

        for stage in stage_configs(config, "demo_workdir").values():
            check_config(stage)
        EvalConfig.from_config(eval_config(config))
    else:
        raise ValueError("config has neither `operators` (an eval config) nor `stage` (a training config)")


def to_json(config, kind: Optional[str] = None) -> str:
    """`--print-config`: the resolved config (`resolved`) as indented JSON, keys sorted."""
    import json

    return json.dumps(resolved(config, kind).to_dict(), indent=2, sort_keys=True, default=repr)
