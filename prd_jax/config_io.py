"""Load `ml_collections` config files (`get_config(arg)`) and apply `--config.x=v` overrides.

docs/design.md principle 6: configs are Python files; `path.py:arg` passes `arg` to
`get_config`. An override may set any field the config's schema declares
(`prd_jax.config_schema`), listed in the file or not; its value is converted to the
declared type (Python literals are parsed; a string field takes the text as written).
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import os
from typing import Callable, Optional, Sequence

import ml_collections

from prd_jax import fileio
from prd_jax.config_fields import declared
from prd_jax.config_schema import MOVED, convert, leaves, literal, moved
from prd_jax.host import is_main

PREFIX = "--config."


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


def apply_overrides(config, overrides: Sequence[str], kind: Optional[str] = None,
                    declare: Optional[Callable] = None):
    """Apply `--config.a.b=value` strings in order. Any field the config's schema declares
    (`config_fields.declared`; `kind` as there) can be set, whether or not the file lists it:
    an absent one is inserted, converted to its declared type; a field the file lists but no
    schema declares keeps its value's type. Unknown fields raise naming the nearest valid
    names; a value of the wrong type raises naming the type expected. `declare(config)` lists
    the fields when the config declares its own (the demo: `demo.declared_fields`)."""

    for item in overrides:
        if not item.startswith(PREFIX) or "=" not in item:
            raise ValueError(f"override {item!r}: expected --config.FIELD=VALUE")
        dotted, raw = item[len(PREFIX):].split("=", 1)
        if dotted in MOVED:
            raise ValueError(f"override {item!r}: " + moved(dotted, MOVED[dotted]))
        schema = declare(config) if declare is not None else declared(config, kind)
        field = schema.get(dotted)
        node = _parent(config, dotted, field is not None, schema)
        *_, leaf = dotted.split(".")
        present = node is not None and leaf in node.keys()
        if field is not None:
            value = convert(dotted, raw, field.type, field.source)
        elif present:
            value = _like(dotted, raw, node[leaf])
        else:
            raise ValueError(unknown_field(config, dotted, schema))
        if present and value is not None and node[leaf] is not None and type(node[leaf]) is not type(value):
            del node[leaf]  # a file value of another type (an int where a float is declared)
        node[leaf] = value
    return config


def _parent(config, dotted: str, declared: bool, schema: dict):
    """The node that holds `dotted`'s leaf; a declared field's missing (or None) parents are
    created. None when an undeclared path's parent is absent."""
    *parents, _ = dotted.split(".")
    node = config
    for i, name in enumerate(parents):
        child = node[name] if name in node.keys() else None
        if not hasattr(child, "keys"):
            if not declared:
                return None
            if child is not None:
                raise ValueError(f"--config.{dotted}: config.{'.'.join(parents[:i + 1])} is {child!r}, "
                                 "not a sub-config")
            child = ml_collections.ConfigDict()
            node[name] = child
        node = child
    return node


def _like(dotted: str, raw: str, current):
    """`raw` parsed as a value of `current`'s type (a field no schema declares)."""
    if current is None:
        return literal(raw)
    tp = tuple if isinstance(current, (list, tuple)) else type(current)
    return convert(dotted, raw, tp, "the config file")


def unknown_field(config, dotted: str, schema: dict) -> str:
    """One line: `dotted` is no field; the nearest valid names (difflib)."""
    names = sorted(set(schema) | set(leaves(config)))
    parent, _, leaf = dotted.rpartition(".")
    siblings = {n.rpartition(".")[2]: n for n in names if n.rpartition(".")[0] == parent}
    close = [siblings[s] for s in difflib.get_close_matches(leaf, list(siblings), n=3, cutoff=0.6)]
    close = close or difflib.get_close_matches(dotted, names, n=3, cutoff=0.7)
    if close:
        hint = f"nearest: {', '.join('config.' + n for n in close)}"
    else:  # the fields of the deepest sub-config the path names
        parts = dotted.split(".")[:-1]
        while parts and not any(n.startswith(".".join(parts) + ".") for n in names):
            parts.pop()
        prefix = ".".join(parts) + "." if parts else ""
        fields = sorted({n[len(prefix):].split(".")[0] for n in names if n.startswith(prefix)})
        hint = f"fields of config{'.' + prefix[:-1] if prefix else ''}: {', '.join(fields)}"
    return f"--config.{dotted}: config has no field {dotted!r}; {hint} (--print-config lists every field)"


def save_config(config, workdir: str) -> None:
    """`workdir/config.json`: the resolved config (principle 6), written by process 0 through
    `prd_jax.fileio` (local path or gs://)."""
    if is_main():
        fileio.write_text(os.path.join(workdir, "config.json"),
                          config.to_json_best_effort(indent=2) if hasattr(config, "to_json_best_effort")
                          else json.dumps(dict(config), indent=2, default=str))
