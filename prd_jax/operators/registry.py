"""Operator registry: an operator registers its run function under a name with its spec class.

`@register_operator("pdr", spec=PDR)` on `pdr(lm, problems, keys, spec, ctx) -> OperatorResult`
is all the eval harness (`evaluate.build_spec`, config entries `{"type": "pdr", ...}`), the
runner's dispatch (`runner.run`), operator RL (`RLConfig.operator`) and the AOT program
listing need: they find operators here alone. What each operator needs from its context
(template roles, candidate headers `k_max`, summary budget `kappa`) and which rounds RL may
train, its spec class declares (`specs.OperatorSpec`). docs/extending.md ("An operator") shows a
new operator defined outside the library.

The module itself is pure Python (it imports only `specs` and `call_budget`).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

from prd_jax.operators.call_budget import BUDGET_FIELDS, budget_names, fold_budget
from prd_jax.operators.specs import OperatorSpec

__all__ = ["Operator", "build_spec", "get_operator", "operator_for", "operator_names", "register_operator"]


@dataclasses.dataclass(frozen=True)
class Operator:
    """A registered operator: its config `type` name, spec class and run function."""

    name: str
    spec: type
    run: Callable


_BY_NAME: dict = {}
_BY_SPEC: dict = {}


def register_operator(name: str, *, spec: type, replace: bool = False) -> Callable:
    """Decorator: register `fn(lm, problems, keys, spec, ctx) -> OperatorResult` as operator
    `name` for specs of class `spec` (a frozen dataclass subclassing `specs.OperatorSpec`).

    A second registration of the name or the spec class raises unless `replace`."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"operator name={name!r}; must be an identifier such as 'pdr'")
    if not (isinstance(spec, type) and dataclasses.is_dataclass(spec) and issubclass(spec, OperatorSpec)):
        raise ValueError(f"register_operator({name!r}, spec={spec!r}): spec must be a dataclass subclassing "
                         "prd_jax.operators.specs.OperatorSpec")
    if not spec.__dataclass_params__.frozen:
        raise ValueError(f"register_operator({name!r}): spec class {spec.__name__} must be frozen "
                         "(specs are static arguments of the jitted operator programs)")
    flat = sorted({f.name for f in dataclasses.fields(spec)} & set(BUDGET_FIELDS))
    if flat:
        raise ValueError(f"register_operator({name!r}): spec class {spec.__name__} declares {flat} itself; embed "
                         "the call budget instead: `budget: CallBudget = CallBudget()` (prd_jax.operators.call_budget)")

    def decorate(fn: Callable) -> Callable:
        for key, table, what in ((name, _BY_NAME, "name"), (spec, _BY_SPEC, "spec class")):
            have = table.get(key)
            if have is not None and have.run is not fn and not replace:
                raise ValueError(f"operator {what} {getattr(key, '__name__', key)!r} is already registered "
                                 f"(to {have.name!r}); pass replace=True to override it")
        old = _BY_NAME.get(name)
        if old is not None:
            _BY_SPEC.pop(old.spec, None)
        entry = Operator(name, spec, fn)
        _BY_NAME[name] = entry
        _BY_SPEC[spec] = entry
        return fn

    return decorate


def operator_names() -> list:
    """Registered operator names, sorted."""
    return sorted(_BY_NAME)


def get_operator(name: str) -> Operator:
    """The operator registered as `name`; ValueError naming the registered ones."""
    if name not in _BY_NAME:
        raise ValueError(f"operator type {name!r}; allowed: {operator_names()}")
    return _BY_NAME[name]


def operator_for(spec) -> Operator:
    """The operator whose spec class `spec` is an instance of (exact class)."""
    entry = _BY_SPEC.get(type(spec))
    if entry is None:
        raise ValueError(f"unknown operator spec {type(spec).__name__}; allowed: "
                         f"{sorted(e.spec.__name__ for e in _BY_NAME.values())} (register it with "
                         "prd_jax.operators.registry.register_operator)")
    return entry


def build_spec(entry, default_type: Optional[str] = None):
    """Operator spec from a config entry {"type": "pdr", "schedule": (8, 4, 1), ...} (a dict or
    ConfigDict; `default_type` when it has no "type"). Lists become tuples; a `judge` dict
    becomes a Judge in the spec's own validation; the call budget's fields are given flat
    (`max_new_tokens=...`; a `budget` dict is taken too). Unknown fields raise naming the
    allowed ones."""
    if hasattr(entry, "to_dict"):
        entry = entry.to_dict()
    entry = dict(entry)
    op = get_operator(entry.pop("type", default_type))
    flat = budget_names(op.spec)
    fields = {f.name for f in dataclasses.fields(op.spec)} | set(flat)
    unknown = set(entry) - fields
    if unknown:
        raise ValueError(f"operator {op.name!r}: unknown fields {sorted(unknown)}; allowed: {sorted(fields)}")
    entry = {k: tuple(v) if isinstance(v, list) else v for k, v in entry.items()}
    return op.spec(**(fold_budget(op.spec.__name__, entry, flat) if flat else entry))
