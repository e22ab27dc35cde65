"""The call budget every operator spec embeds: `CallBudget`, validated once, here.

An operator's generation calls share one budget: how many tokens each call generates
(`max_new_tokens`, the per-call budget of the PDR paper, arXiv 2510.01123 §3), how a quoted
candidate is capped (`candidate_max_tokens`, `truncation_head`), whether it is quoted with
its thinking block (`quote_thinking`) and where a call's thinking is closed (`think_budget`).
A spec holds it as its `budget` field and code reads `spec.budget.max_new_tokens`.

Configs and constructors keep the flat spelling: `dict(type="pdr", max_new_tokens=64)`,
`PDR(max_new_tokens=64)` and `PDR((4, 1), "shared_topk", 2, "random", 64, 64, 16)` build the
spec that `PDR(budget=CallBudget(max_new_tokens=64, ...))` builds (`flat_budget`,
`registry.build_spec`). docs/operators.md ("The call budget") says why.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import numbers

__all__ = ["BUDGET_FIELDS", "CallBudget", "as_budget", "budget_names", "flat_budget", "fold_budget", "settings"]


@dataclasses.dataclass(frozen=True)
class CallBudget:
    """The budget of an operator's generation calls and of the candidates they quote.

    - `max_new_tokens`: tokens each generation call may generate (>= 1);
    - `candidate_max_tokens`: a quoted candidate (workspace, previous answer, judge
      candidate, RSA subset) longer than this keeps its first `truncation_head` tokens and
      its last ones, where the answer is (`calls.candidate`; each cut is counted);
    - `quote_thinking` (ours; the papers are silent): False quotes only the text after a
      candidate's thinking block (`</think>`, `calls.strip_thinking`), True the full text;
    - `think_budget`: 0 (no forced close), or the tokens after which each call's thinking
      block is closed (`sampling.force_think_end`), the rest of `max_new_tokens` left to the
      answer.
    """

    max_new_tokens: int = 512
    candidate_max_tokens: int = 512
    truncation_head: int = 128
    quote_thinking: bool = False
    think_budget: int = 0

    def __post_init__(self):
        for name in ("max_new_tokens", "candidate_max_tokens", "truncation_head", "think_budget"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise ValueError(f"CallBudget.{name}={value!r}; must be an integer")
            object.__setattr__(self, name, int(value))
        for name in ("max_new_tokens", "candidate_max_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"CallBudget.{name}={getattr(self, name)}; must be >= 1")
        if not 0 <= self.truncation_head <= self.candidate_max_tokens:
            raise ValueError(f"CallBudget.truncation_head={self.truncation_head}; "
                             f"allowed: 0..candidate_max_tokens={self.candidate_max_tokens}")
        if not isinstance(self.quote_thinking, bool):
            raise ValueError(f"CallBudget.quote_thinking={self.quote_thinking!r}; allowed: True, False")
        total = self.max_new_tokens
        if self.think_budget < 0 or (self.think_budget and self.think_budget >= total):
            raise ValueError(f"CallBudget.think_budget={self.think_budget}; allowed: 0 (no forced end of thinking) "
                             f"or 1..{total - 1} (below max_new_tokens={total}, the rest is the answer's)")


BUDGET_FIELDS = tuple(f.name for f in dataclasses.fields(CallBudget))
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(CallBudget)}


def as_budget(value=None, **flat) -> CallBudget:
    """A CallBudget from a CallBudget, a dict of its fields (configs give dicts) or None (the
    defaults), with the `flat` fields replacing its own."""
    if isinstance(value, CallBudget) and not flat:
        return value
    if value is None:
        value = {}
    if hasattr(value, "to_dict"):  # ml_collections.ConfigDict
        value = value.to_dict()
    if isinstance(value, CallBudget):
        value = {name: getattr(value, name) for name in BUDGET_FIELDS}
    if not isinstance(value, dict):
        raise ValueError(f"budget={value!r}; must be a CallBudget or a dict of its fields {list(BUDGET_FIELDS)}")
    unknown = set(value) - set(BUDGET_FIELDS)
    if unknown:
        raise ValueError(f"budget: unknown fields {sorted(unknown)}; allowed: {list(BUDGET_FIELDS)}")
    return CallBudget(**{**value, **flat})


def budget_names(spec_class) -> tuple:
    """The budget fields a spec class takes flat: those its `flat_budget` order lists, every
    one for a spec with a plain `budget` field, none for a spec without one."""
    if hasattr(spec_class, "BUDGET_ORDER"):
        return tuple(n for n in spec_class.BUDGET_ORDER if n in BUDGET_FIELDS)
    has = any(f.name == "budget" for f in dataclasses.fields(spec_class))
    return BUDGET_FIELDS if has else ()


def fold_budget(owner: str, given: dict, names: tuple) -> dict:
    """`given` (constructor or config arguments) with the flat budget fields among `names`
    folded into its `budget` (the flat ones win); an error names `owner` and the field."""
    given = dict(given)
    flat = {n: given.pop(n) for n in names if n in given}
    try:
        given["budget"] = as_budget(given.get("budget"), **flat)
    except ValueError as e:
        raise ValueError(f"{owner}: {e}") from None
    return given


def flat_budget(*order: str):
    """Class decorator over an operator spec dataclass with a `budget: CallBudget` field: its
    constructor takes the budget fields in `order` flat as well, positionally where they stood
    before the budget was one field (`order` lists every other field too; no `order`: the
    spec's fields in their order, then all of the budget's). So
    `SR(1, False, 32, 32, 8)` == `SR(rounds=1, max_new_tokens=32, candidate_max_tokens=32,
    truncation_head=8)` == `SR(1, budget=CallBudget(32, 32, 8))`. Flat fields replace those
    of a `budget` also given (`dataclasses.replace(spec, max_new_tokens=64)` works); the budget
    fields `order` leaves out must stay at their defaults (the spec does not use them)."""

    def decorate(cls):
        fields = {f.name: f for f in dataclasses.fields(cls)}
        own = [n for n, f in fields.items() if f.init and n != "budget"]
        names = tuple(order) or tuple(own) + BUDGET_FIELDS
        if ("budget" not in fields or len(set(names)) != len(names)
                or sorted(n for n in names if n not in BUDGET_FIELDS) != sorted(own)):
            raise TypeError(f"flat_budget{order} on {cls.__name__}: the class needs a field `budget: CallBudget = "
                            f"CallBudget()`, and the order lists each of its fields {own} and of the budget fields "
                            f"it takes {list(BUDGET_FIELDS)} once")
        taken = tuple(n for n in names if n in BUDGET_FIELDS)
        defaults = {**_DEFAULTS, **{n: f.default for n, f in fields.items()}}
        sig = inspect.Signature([inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=defaults[n])
                                 for n in names] +
                                [inspect.Parameter("budget", inspect.Parameter.KEYWORD_ONLY, default=CallBudget())])
        init = cls.__init__

        @functools.wraps(init)
        def __init__(self, *args, **kwargs):
            try:
                bound = sig.bind(*args, **kwargs).arguments
            except TypeError as e:
                raise TypeError(f"{cls.__name__}: {e}; it takes {list(names)} and budget=CallBudget(...)") from None
            given = fold_budget(cls.__name__, bound, taken)
            for name in BUDGET_FIELDS:
                if name not in taken and getattr(given["budget"], name) != _DEFAULTS[name]:
                    raise ValueError(f"{cls.__name__}: CallBudget.{name}={getattr(given['budget'], name)!r}; "
                                     f"{cls.__name__} uses only {list(taken)} of its budget, leave {name} at "
                                     f"{_DEFAULTS[name]!r}")
            init(self, **given)

        __init__.__signature__ = sig.replace(parameters=[inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)]
                                             + list(sig.parameters.values()))
        cls.__init__ = __init__
        cls.__signature__ = sig
        cls.BUDGET_ORDER = names
        return cls

    return decorate


def settings(spec) -> list:
    """(name, value, default) of each of `spec`'s settings, the budget's fields flat: in
    its `flat_budget` order, else in field order with the budget's in its place."""
    fields = {f.name: f for f in dataclasses.fields(spec)}
    order = getattr(type(spec), "BUDGET_ORDER", None)
    if order is None:
        order = [m for n in fields for m in (BUDGET_FIELDS if n == "budget" else (n,))]
    return [(n, getattr(spec.budget, n), _DEFAULTS[n]) if n in BUDGET_FIELDS and "budget" in fields
            else (n, getattr(spec, n), fields[n].default) for n in order]
