"""What every operator's settings share: the `OperatorSpec` base, the V1 `Judge`, the
selector vocabulary and the validation helpers each spec's `__post_init__` calls.

Each operator's own spec class lives in its module, beside its run function (`long_cot.py`,
`sr.py`, `pdr.py`, `best_of_n.py`, `rsa.py`, `adaptive_pdr.py`): the plug-in shape of
docs/extending.md. Long-CoT, SR and PDR follow the PDR paper (arXiv 2510.01123 §3); `Judge`,
best-of-N and RSA follow V1-Infer (arXiv 2603.04304 §4).

Every spec's generation calls share one `CallBudget` (`call_budget.py`: `max_new_tokens`,
candidate truncation, `quote_thinking`, `think_budget`), its `budget` field.

Specs are frozen dataclasses: hashable, so they are static arguments of the jitted
operator programs. Each error names the field and says what is allowed.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from prd_jax.operators.call_budget import BUDGET_FIELDS, CallBudget, flat_budget, settings  # noqa: F401 (specs use)
from prd_jax.sampling import Sampling  # noqa: F401  (the one sampling config; operators' context carries it)

DISTILL_VARIANTS = ("global_summary", "shared_topk", "per_sample_topk", "random_k")

# One selector vocabulary for every operator: each name means one thing wherever it is used.
SELECTORS = {
    "random": "uniformly random choice: best-of-N picks one candidate, a PDR top-k workspace "
              "holds a uniformly random k (labelled random-k); no judge calls",
    "self_pointwise": "the policy rates each candidate 1-10 with the pointwise judge (V1 §4 "
                      "baseline); ties go to the lower index",
    "pairwise_v1": "V1-Infer uncertainty-guided Swiss tournament with the pairwise judge, "
                   "B = budget_multiple * N calls (V1 §4, Alg. 2-4)",
    "pairwise_random": "pairwise judge on fresh random disjoint pairings at the same budget as "
                       "pairwise_v1, scored by the same mu (V1 §4 baseline)",
    "round_robin": "pairwise judge on all C(N, 2) pairs, scored by mu (V1 §4 baseline)",
    "majority": "most frequent extracted answer (the task's answer key); no judge calls. A PDR "
                "top-k holds the k candidates whose answers most candidates share, candidates "
                "without an answer last (ours: the extractive form of the summary's agreements, §3.1)",
    "oracle_correct": "ground truth admits only correct candidates (PDR §4.1, App. D.1, Figs. 6 and 8)",
    "oracle_incorrect": "ground truth admits only incorrect candidates (PDR §4.1, App. D.1, Figs. 6 and 8)",
}
JUDGE_SELECTORS = ("self_pointwise", "pairwise_v1", "pairwise_random", "round_robin")  # make judge calls
MODEL_SELECTORS = JUDGE_SELECTORS  # rank the candidates with judge calls
ORACLE_SELECTORS = ("oracle_correct", "oracle_incorrect")  # admit by ground truth (PDR Figs. 6, 8)
PDR_SELECTORS = ("random", "self_pointwise", "pairwise_v1", "majority", "oracle_correct", "oracle_incorrect")
BEST_OF_N_SELECTORS = ("random", "self_pointwise", "pairwise_v1", "pairwise_random", "round_robin", "majority")
RSA_FINALS = ("first", "majority", "pairwise_v1")
JUDGE_DOMAINS = ("math", "code")
PAIRWISE_SELECTORS = ("pairwise_v1", "pairwise_random", "round_robin")
PDR_KAPPA = 256  # PDR's default summary budget (`pdr.PDR.kappa`; `with_thinking` reads it)


class OperatorSpec:
    """What an operator declares to the code that runs it (eval, operator RL, AOT compile).

    A spec class is a frozen dataclass of the operator's settings that also subclasses this
    one; `registry.register_operator(name, spec=...)` ties it to its run function. The
    declarations (override where the defaults do not fit):
    - `template_roles()`: the template roles its calls read (checked against the context's
      set before it runs; an operator's own role is added with `prompts.add_template`);
    - `k_max`: candidate headers its prompts list at most (compiled into the context);
    - `kappa`: the summary budget its templates' `{kappa}` is compiled with (None: none);
    - `round_sizes()`: calls per problem of each round whose trace it returns under
      `Context.trace` (() : it returns none, so operator RL cannot train it);
    - `trainable_rounds(gradient_targets)`: the rounds operator RL trains (PDR §3.3: the
      final round; with "drafts_and_refine" also the first).
    - `label`: unique per spec (resume keys, tables); `labelled` builds it.
    """

    TEMPLATES: tuple = ()
    kappa = None  # a dataclass field of the same name overrides it (PDR)

    def __getattr__(self, name):  # only for names not found: the budget's fields moved into `budget`
        if name in BUDGET_FIELDS:
            raise AttributeError(f"{type(self).__name__}.{name} is read as spec.budget.{name} "
                                 "(the CallBudget every spec embeds, operators/call_budget.py)")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def template_roles(self) -> tuple:
        return tuple(self.TEMPLATES)

    @property
    def k_max(self) -> int:
        return 1

    def round_sizes(self) -> tuple:
        return ()

    def trainable_rounds(self, gradient_targets: str = "refine") -> tuple:
        sizes = self.round_sizes()
        if not sizes:
            return ()
        last = len(sizes) - 1
        return (last,) if gradient_targets == "refine" or last == 0 else (last, 0)


def _value(v) -> str:
    if isinstance(v, Judge):
        return v.label
    if isinstance(v, tuple):
        return "-".join(map(str, v))
    return str(v)


def labelled(spec, name: str, core: list, shown) -> str:
    """`name(core..., other=value..., budget=max_new_tokens)`: the readable `core` parts, then
    every setting not in `shown` (the call budget's fields among them, `call_budget.settings`)
    whose value differs from its default. A setting is thus either in the core or at its
    default, so two different specs never share a label."""
    extra = []
    for field, value, default in settings(spec):
        if field in shown or field == "max_new_tokens" or value == default:
            continue
        extra.append(field if value is True else f"{field}={_value(value)}")
    budget = [f"budget={spec.budget.max_new_tokens}"] if hasattr(spec, "budget") else []
    return f"{name}({','.join([p for p in core if p] + extra + budget)})"


def check_think(obj, field: str, total: int) -> None:
    """A thinking budget (the call's thinking block is force-closed after this many
    tokens, `sampling.force_think_end`) is 0 (off) or leaves answer tokens in `total`."""
    value = getattr(obj, field)
    if value < 0 or (value and value >= total):
        raise ValueError(f"{type(obj).__name__}.{field}={value}; allowed: 0 (no forced end of thinking) or "
                         f"1..{total - 1} (below the call's budget of {total}, the rest is the answer's)")


def check_positive(obj, *fields):
    for f in fields:
        if getattr(obj, f) < 1:
            raise ValueError(f"{type(obj).__name__}.{f}={getattr(obj, f)}; must be >= 1")


def check_bool(obj, *fields):
    for f in fields:
        if not isinstance(getattr(obj, f), bool):
            raise ValueError(f"{type(obj).__name__}.{f}={getattr(obj, f)!r}; allowed: True, False")


def thinking_label(obj) -> str:
    return ",quote_thinking" if obj.budget.quote_thinking else ""


@dataclasses.dataclass(frozen=True)
class Judge:
    """Self-verification settings (V1-Infer, V1 §4).

    `max_new_tokens` is the judge's reasoning budget (0: no reasoning, the rating is read
    at once from the forced tag). Pairwise tournaments spend B = `budget_multiple` * N
    judge calls (V1 uses m in {1, 2, 3}); `both_orders` judges (A, B) and (B, A), two
    calls per pair, against position bias. `d_min`, `window`, `tau` are Alg. 2-4's
    d_min, h and tau. The judge prompts are the template set's `pairwise` / `pointwise`
    roles; `domain` (None: whatever the set's domain is) states the domain they must
    assess ("math" or "code"), and a set of another domain is refused when the judge runs.
    """

    domain: Optional[str] = None
    max_new_tokens: int = 0
    budget_multiple: int = 1
    both_orders: bool = False
    d_min: int = 2
    window: int = 8
    tau: float = 0.1
    think_budget: int = 0  # > 0: the judge's thinking block is closed here, leaving the rest to answer

    def __post_init__(self):
        check_think(self, "think_budget", self.max_new_tokens)
        if self.domain is not None and self.domain not in JUDGE_DOMAINS:
            raise ValueError(f"Judge.domain={self.domain!r}; allowed: None (the template set's), {JUDGE_DOMAINS}")
        if self.max_new_tokens < 0:
            raise ValueError(f"Judge.max_new_tokens={self.max_new_tokens}; must be >= 0")
        check_positive(self, "budget_multiple", "window")
        if self.d_min < 0:
            raise ValueError(f"Judge.d_min={self.d_min}; must be >= 0")
        if not 0.0 < self.tau <= 1.0:
            raise ValueError(f"Judge.tau={self.tau}; allowed: (0, 1]")

    @property
    def label(self) -> str:
        """Every field that is not at its default (the readable ones always)."""
        parts = [self.domain or "", f"m={self.budget_multiple}", f"think={self.max_new_tokens}",
                 "both_orders" if self.both_orders else ""]
        for name in ("d_min", "window", "tau", "think_budget"):
            if getattr(self, name) != Judge.__dataclass_fields__[name].default:
                parts.append(f"{name}={getattr(self, name)}")
        return ",".join(p for p in parts if p)


def with_thinking(entries, answer_tokens: int, summary_answer_tokens: int, judge_answer_tokens: int) -> list:
    """Operator config entries with each call role's budget split into a thinking budget and
    an answer budget (a thinking model: the sampler closes the thinking block at the thinking
    budget, `sampling.force_think_end`). Generation calls keep `answer_tokens` of
    `max_new_tokens` for the marker and the answer; the PDR summary keeps
    `summary_answer_tokens` of `kappa`; a judge keeps `judge_answer_tokens` of its
    reasoning budget. A budget no larger than its answer part gets no forced close (0).
    Returns new dicts."""
    out = []
    for entry in entries:
        e = dict(entry.to_dict() if hasattr(entry, "to_dict") else entry)
        e["think_budget"] = max(0, e["max_new_tokens"] - answer_tokens)
        if e.get("type") == "pdr":
            e["kappa_think"] = max(0, e.get("kappa", PDR_KAPPA) - summary_answer_tokens)
        judge = e.get("judge")
        if judge is not None:
            judge = dict(judge.to_dict() if hasattr(judge, "to_dict") else judge)
            if judge.get("max_new_tokens", 0) > judge_answer_tokens:
                judge["think_budget"] = judge["max_new_tokens"] - judge_answer_tokens
            e["judge"] = judge
        out.append(e)
    return out


def as_judge(value) -> Judge:
    """A Judge from a Judge or a dict of its fields (configs give dicts)."""
    if isinstance(value, Judge):
        return value
    if hasattr(value, "to_dict"):  # ml_collections.ConfigDict
        value = value.to_dict()
    if isinstance(value, dict):
        unknown = set(value) - set(Judge.__dataclass_fields__)
        if unknown:
            raise ValueError(f"judge: unknown fields {sorted(unknown)}; allowed: {sorted(Judge.__dataclass_fields__)}")
        return Judge(**value)
    raise ValueError(f"judge={value!r}; must be a Judge or a dict of its fields")


def judge_roles(selector: str) -> tuple:
    if selector == "self_pointwise":
        return ("pointwise",)
    return ("pairwise",) if selector in PAIRWISE_SELECTORS else ()
