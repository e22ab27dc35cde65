"""Operator settings, validated at construction.

Long-CoT, SR and PDR follow the PDR paper (arXiv 2510.01123 §3); `Judge`, `BestOfN` and
`RSA` follow V1-Infer (arXiv 2603.04304 §4; RSA is its recursive self-aggregation baseline).

`quote_thinking` (SR, PDR, BestOfN, RSA; ours, the papers are silent): by default a quoted
candidate (workspace, previous answer, judge candidate, RSA subset) carries only the text
after its thinking block (`</think>`, see `calls.strip_thinking`); True quotes the full text.

Specs are frozen dataclasses: hashable, so they are static arguments of the jitted
operator programs. Each error names the field and says what is allowed.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Tuple

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
    every field not in `shown` whose value differs from its default. A field is thus either
    in the core or at its default, so two different specs never share a label."""
    extra = []
    for f in dataclasses.fields(spec):
        value = getattr(spec, f.name)
        if f.name in shown or f.name == "max_new_tokens" or value == f.default:
            continue
        extra.append(f.name if value is True else f"{f.name}={_value(value)}")
    budget = [f"budget={spec.max_new_tokens}"] if hasattr(spec, "max_new_tokens") else []
    return f"{name}({','.join([p for p in core if p] + extra + budget)})"


def _check_think(obj, field: str, total: int) -> None:
    """A thinking budget (the call's thinking block is force-closed after this many
    tokens, `sampling.force_think_end`) is 0 (off) or leaves answer tokens in `total`."""
    value = getattr(obj, field)
    if value < 0 or (value and value >= total):
        raise ValueError(f"{type(obj).__name__}.{field}={value}; allowed: 0 (no forced end of thinking) or "
                         f"1..{total - 1} (below the call's budget of {total}, the rest is the answer's)")


def _positive(obj, *fields):
    for f in fields:
        if getattr(obj, f) < 1:
            raise ValueError(f"{type(obj).__name__}.{f}={getattr(obj, f)}; must be >= 1")


def _check_bool(obj, *fields):
    for f in fields:
        if not isinstance(getattr(obj, f), bool):
            raise ValueError(f"{type(obj).__name__}.{f}={getattr(obj, f)!r}; allowed: True, False")


def _thinking(obj) -> str:
    return ",quote_thinking" if obj.quote_thinking else ""


def _check_truncation(obj):
    if not 0 <= obj.truncation_head <= obj.candidate_max_tokens:
        raise ValueError(f"{type(obj).__name__}.truncation_head={obj.truncation_head}; "
                         f"allowed: 0..candidate_max_tokens={obj.candidate_max_tokens}")


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
        _check_think(self, "think_budget", self.max_new_tokens)
        if self.domain is not None and self.domain not in JUDGE_DOMAINS:
            raise ValueError(f"Judge.domain={self.domain!r}; allowed: None (the template set's), {JUDGE_DOMAINS}")
        if self.max_new_tokens < 0:
            raise ValueError(f"Judge.max_new_tokens={self.max_new_tokens}; must be >= 0")
        _positive(self, "budget_multiple", "window")
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
            e["kappa_think"] = max(0, e.get("kappa", PDR.kappa) - summary_answer_tokens)
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


def _judge_roles(selector: str) -> tuple:
    if selector == "self_pointwise":
        return ("pointwise",)
    return ("pairwise",) if selector in PAIRWISE_SELECTORS else ()


@dataclasses.dataclass(frozen=True)
class LongCoT(OperatorSpec):
    """A single long chain of thought with `max_new_tokens` output tokens (PDR §4 baseline)."""

    max_new_tokens: int = 512
    think_budget: int = 0  # > 0: thinking is closed after this many tokens (`_check_think`)

    TEMPLATES = ("solve",)

    def __post_init__(self):
        _positive(self, "max_new_tokens")
        _check_think(self, "think_budget", self.max_new_tokens)

    def round_sizes(self) -> tuple:
        return (1,)

    @property
    def label(self) -> str:
        return labelled(self, "long_cot", [], ())


@dataclasses.dataclass(frozen=True)
class SR(OperatorSpec):
    """Sequential refinement (PDR §3.2.1): one solve, then `rounds` refinements of the previous answer."""

    rounds: int = 2
    error_analysis: bool = False
    max_new_tokens: int = 512
    candidate_max_tokens: int = 512
    truncation_head: int = 128
    quote_thinking: bool = False
    think_budget: int = 0  # > 0: a call's thinking is closed after this many tokens (`_check_think`)

    TEMPLATES = ("solve", "sr_refine", "sr_error_analysis")

    def __post_init__(self):
        _positive(self, "rounds", "max_new_tokens", "candidate_max_tokens")
        _check_think(self, "think_budget", self.max_new_tokens)
        _check_truncation(self)
        _check_bool(self, "error_analysis", "quote_thinking")

    def template_roles(self) -> tuple:
        return ("solve", "sr_error_analysis" if self.error_analysis else "sr_refine")

    def round_sizes(self) -> tuple:
        return (1,) * (self.rounds + 1)

    @property
    def label(self) -> str:
        ea = "error_analysis" if self.error_analysis else ""
        return labelled(self, "sr", [f"rounds={self.rounds}", ea, _thinking(self)[1:]],
                        ("rounds", "error_analysis", "quote_thinking"))


@dataclasses.dataclass(frozen=True)
class PDR(OperatorSpec):
    """Parallel-Distill-Refine with schedule (M_1, ..., M_R), M_R = 1 (paper §3.2).

    Distill variants (paper §3.2, Fig. 2b) and the `selector` each one takes (`SELECTORS`
    says what each name means; PDR takes `PDR_SELECTORS`):
    - `shared_topk` / `per_sample_topk`: the k candidates `selector` ranks first. A model
      ranker (`self_pointwise`, or `pairwise_v1`, our V1 extension) is the paper's top-k;
      `random` picks k uniformly at random, so the workspace is a random k (labelled
      `random-k`); `majority` (ours, no model calls) ranks by how many candidates share
      each one's final answer; an oracle admits only (in)correct candidates (paper §4.1
      and App. D.1, Figs. 6 and 8).
    - `random_k`: each refine call draws its own k at random; no selector runs, so
      `selector` must be "random".
    - `global_summary`: one summary of at most `kappa` tokens over every candidate
      (`selector="random"`, the default), or over the candidates an oracle admits
      (`oracle_correct` / `oracle_incorrect`, paper Figs. 6 and 8). Model rankers are
      refused: the summary would not use their ranking.

    `summary_vote_counts` (ours; off by default, the paper's summary keeps agreements,
    contradictions, intermediate results and open subgoals, §3.1) asks the summary to also
    list every final answer with how many candidates reached it (`distill_summary_votes`).
    `refine_template` "topk" uses the numbered-candidates prompt; "previous" feeds the
    top-1 candidate through the SR prompt (so schedule (1, ..., 1) is SR).
    """

    schedule: Tuple[int, ...] = (8, 4, 1)
    distill: str = "shared_topk"
    k: int = 2
    selector: str = "random"
    kappa: int = 256
    max_new_tokens: int = 512
    candidate_max_tokens: int = 512
    truncation_head: int = 128
    refine_template: str = "topk"
    judge: Judge = Judge()
    summary_vote_counts: bool = False
    quote_thinking: bool = False
    think_budget: int = 0  # > 0: a call's thinking is closed after this many tokens (`_check_think`)
    kappa_think: int = 0  # > 0: the summary call's thinking is closed after this many of its kappa tokens

    TEMPLATES = ("solve", "pdr_topk", "sr_refine", "pdr_summary", "distill_summary", "distill_summary_votes",
                 "pointwise", "pairwise")

    def __post_init__(self):
        object.__setattr__(self, "schedule", tuple(int(m) for m in self.schedule))
        if len(self.schedule) < 2 or self.schedule[-1] != 1 or min(self.schedule) < 1:
            raise ValueError(f"PDR.schedule={self.schedule}; must have >= 2 rounds of positive sizes "
                             "and end with M_R = 1, e.g. (8, 4, 1)")
        if self.distill not in DISTILL_VARIANTS:
            raise ValueError(f"PDR.distill={self.distill!r}; allowed: {DISTILL_VARIANTS}")
        if self.selector not in PDR_SELECTORS:
            raise ValueError(f"PDR.selector={self.selector!r}; allowed: {PDR_SELECTORS}")
        if self.distill == "random_k" and self.selector != "random":
            raise ValueError(f"PDR.selector={self.selector!r} with distill='random_k': random-k draws its "
                             "candidates at random and runs no selector; allowed: 'random'")
        if self.distill == "global_summary" and self.selector not in ("random",) + ORACLE_SELECTORS:
            raise ValueError(f"PDR.selector={self.selector!r} with distill='global_summary': the summary "
                             f"reads its candidates unranked; allowed: 'random' (all candidates), "
                             f"{ORACLE_SELECTORS} (oracle selection into the summary)")
        _positive(self, "k", "kappa", "max_new_tokens", "candidate_max_tokens")
        _check_think(self, "think_budget", self.max_new_tokens)
        _check_think(self, "kappa_think", self.kappa)
        if self.distill != "global_summary" and self.k > min(self.schedule[:-1]):
            raise ValueError(f"PDR.k={self.k} exceeds the smallest distilled round M="
                             f"{min(self.schedule[:-1])} of schedule {self.schedule}; need k <= M")
        _check_truncation(self)
        object.__setattr__(self, "judge", as_judge(self.judge))
        if self.refine_template not in ("topk", "previous"):
            raise ValueError(f"PDR.refine_template={self.refine_template!r}; allowed: 'topk', 'previous'")
        if self.refine_template == "previous" and (self.k != 1 or self.distill == "global_summary"):
            raise ValueError("PDR.refine_template='previous' needs k=1 and an extractive distill")
        _check_bool(self, "summary_vote_counts", "quote_thinking")
        if self.summary_vote_counts and self.distill != "global_summary":
            raise ValueError(f"PDR.summary_vote_counts=True needs distill='global_summary' "
                             f"(got distill={self.distill!r})")

    def template_roles(self) -> tuple:
        if self.distill == "global_summary":
            refine = ("distill_summary_votes" if self.summary_vote_counts else "distill_summary", "pdr_summary")
        else:
            refine = ("sr_refine",) if self.refine_template == "previous" else ("pdr_topk",)
        judged = _judge_roles(self.selector) if self.distill != "random_k" else ()
        return ("solve",) + refine + judged

    @property
    def k_max(self) -> int:
        """A global summary lists up to a round's M candidates (top-k lists k <= M)."""
        return max(self.schedule)

    def round_sizes(self) -> tuple:
        return self.schedule

    @property
    def label(self) -> str:
        """`pdr(schedule,distill,...)`: kappa for a summary, k and the selector for top-k
        ("random-k" for a random top-k), the judge when a model ranks, then every other
        non-default field (refine template, candidate truncation, ...)."""
        shown = {"schedule", "distill", "quote_thinking"}
        if self.distill == "global_summary":
            core = [f"kappa={self.kappa}", f"sel={self.selector}" if self.selector in ORACLE_SELECTORS else "",
                    "vote_counts" if self.summary_vote_counts else ""]
            shown |= {"kappa", "selector", "summary_vote_counts"}
        elif self.distill == "random_k":
            core = [f"k={self.k}"]
            shown |= {"k", "selector"}
        elif self.selector == "random":  # a uniformly random pick: the "top-k" is a random k
            core = [f"k={self.k}", "random-k"]
            shown |= {"k", "selector"}
        else:
            judged = f"[{self.judge.label}]" if self.selector in MODEL_SELECTORS else ""
            core = [f"k={self.k}", f"sel={self.selector}{judged}"]
            shown |= {"k", "selector"} | ({"judge"} if judged else set())
        sched = "-".join(map(str, self.schedule))
        return labelled(self, "pdr", [sched, self.distill] + core + [_thinking(self)[1:]], shown)


@dataclasses.dataclass(frozen=True)
class BestOfN(OperatorSpec):
    """Draft N candidates in parallel and select one (V1-Infer, V1 §4, and its baselines).

    Selectors (`SELECTORS` says what each name means; best-of-N takes
    `BEST_OF_N_SELECTORS`): `self_pointwise` (each candidate rated 1-10; ties to the lower
    index), `pairwise_v1` (uncertainty-guided Swiss tournament, B = m*N calls),
    `pairwise_random` (random disjoint pairings at the same budget), `round_robin` (all
    C(N, 2) pairs), `majority` (most frequent extracted answer) and `random` (a uniformly
    random candidate); the last two make no judge calls.
    """

    n: int = 16
    selector: str = "pairwise_v1"
    max_new_tokens: int = 512
    candidate_max_tokens: int = 512
    truncation_head: int = 128
    judge: Judge = Judge()
    quote_thinking: bool = False
    think_budget: int = 0  # > 0: a call's thinking is closed after this many tokens (`_check_think`)

    TEMPLATES = ("solve", "pointwise", "pairwise")

    def __post_init__(self):
        _positive(self, "n", "max_new_tokens", "candidate_max_tokens")
        _check_think(self, "think_budget", self.max_new_tokens)
        if self.selector not in BEST_OF_N_SELECTORS:
            raise ValueError(f"BestOfN.selector={self.selector!r}; allowed: {BEST_OF_N_SELECTORS}")
        _check_truncation(self)
        object.__setattr__(self, "judge", as_judge(self.judge))
        _check_bool(self, "quote_thinking")

    def template_roles(self) -> tuple:
        return ("solve",) + _judge_roles(self.selector)

    @property
    def label(self) -> str:
        judged = f"[{self.judge.label}]" if self.selector in JUDGE_SELECTORS else ""
        shown = {"n", "selector", "quote_thinking"} | ({"judge"} if judged else set())
        return labelled(self, "best_of_n", [f"n={self.n}", f"sel={self.selector}{judged}", _thinking(self)[1:]],
                        shown)


@dataclasses.dataclass(frozen=True)
class RSA(OperatorSpec):
    """Recursive self-aggregation: a population of N, T loops, each new member aggregating
    K members drawn at random (V1 §4 baseline). With `prune_every` = p > 0, before loops
    p, 2p, ... a Swiss tournament ranks the population and only the top `keep` may be
    drawn (V1's RSA + verification). `final`: member 0 ("first", an exchangeable random
    member, as RSA reports mean accuracy), "majority", or a "pairwise_v1" tournament.
    """

    population: int = 8
    subset: int = 2
    loops: int = 2
    max_new_tokens: int = 512
    candidate_max_tokens: int = 512
    truncation_head: int = 128
    prune_every: int = 0
    keep: int = 0
    final: str = "first"
    judge: Judge = Judge()
    quote_thinking: bool = False
    think_budget: int = 0  # > 0: a call's thinking is closed after this many tokens (`_check_think`)

    TEMPLATES = ("solve", "rsa_aggregate", "pairwise")

    def __post_init__(self):
        _positive(self, "population", "subset", "loops", "max_new_tokens", "candidate_max_tokens")
        _check_think(self, "think_budget", self.max_new_tokens)
        _check_truncation(self)
        if self.subset > self.population:
            raise ValueError(f"RSA.subset={self.subset} exceeds population={self.population}")
        if self.prune_every < 0:
            raise ValueError(f"RSA.prune_every={self.prune_every}; must be >= 0 (0: no pruning)")
        if self.prune_every and not self.subset <= self.keep <= self.population:
            raise ValueError(f"RSA.keep={self.keep}; with pruning it must lie in "
                             f"subset..population = {self.subset}..{self.population}")
        if self.final not in RSA_FINALS:
            raise ValueError(f"RSA.final={self.final!r}; allowed: {RSA_FINALS}")
        object.__setattr__(self, "judge", as_judge(self.judge))
        _check_bool(self, "quote_thinking")

    def template_roles(self) -> tuple:
        judged = self.prune_every or self.final == "pairwise_v1"
        return ("solve", "rsa_aggregate") + (("pairwise",) if judged else ())

    @property
    def k_max(self) -> int:
        return self.subset

    @property
    def label(self) -> str:
        prune = f"prune={self.prune_every}/keep={self.keep}" if self.prune_every else ""
        judged = f"[{self.judge.label}]" if self.prune_every or self.final == "pairwise_v1" else ""
        shown = {"population", "subset", "loops", "prune_every", "keep", "final", "quote_thinking"}
        shown |= {"judge"} if judged else set()
        if not self.prune_every:
            shown.discard("keep")  # keep only matters with pruning; shown as other=value if set
        return labelled(self, "rsa", [f"N={self.population}", f"K={self.subset}", f"T={self.loops}", prune,
                                      f"final={self.final}{judged}", _thinking(self)[1:]], shown)
