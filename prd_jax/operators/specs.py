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
from typing import Tuple

DISTILL_VARIANTS = ("global_summary", "shared_topk", "per_sample_topk", "random_k")
SELECTORS = ("self_pointwise", "pairwise_v1", "random", "oracle_correct", "oracle_incorrect")
MODEL_SELECTORS = ("self_pointwise", "pairwise_v1")  # rank the candidates with judge calls
ORACLE_SELECTORS = ("oracle_correct", "oracle_incorrect")  # admit by ground truth (PDR Figs. 6, 8)
BEST_OF_N_SELECTORS = ("pointwise", "pairwise_v1", "majority", "random", "round_robin")
RSA_FINALS = ("first", "majority", "pairwise_v1")
JUDGE_DOMAINS = ("math", "code")


def _positive(obj, *fields):
    for f in fields:
        if getattr(obj, f) < 1:
            raise ValueError(f"{type(obj).__name__}.{f}={getattr(obj, f)}; must be >= 1")


@dataclasses.dataclass(frozen=True)
class Sampling:
    """Per-call sampling shared by every call of an operator (paper: T=1.0, top-p 1.0)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    stop_ids: tuple = ()
    max_rows: int = 0  # most decode rows in flight per call (sampling.SamplingConfig.max_rows); 0 = all


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
    d_min, h and tau.
    """

    domain: str = "math"
    max_new_tokens: int = 0
    budget_multiple: int = 1
    both_orders: bool = False
    d_min: int = 2
    window: int = 8
    tau: float = 0.1

    def __post_init__(self):
        if self.domain not in JUDGE_DOMAINS:
            raise ValueError(f"Judge.domain={self.domain!r}; allowed: {JUDGE_DOMAINS}")
        if self.max_new_tokens < 0:
            raise ValueError(f"Judge.max_new_tokens={self.max_new_tokens}; must be >= 0")
        _positive(self, "budget_multiple", "window")
        if self.d_min < 0:
            raise ValueError(f"Judge.d_min={self.d_min}; must be >= 0")
        if not 0.0 < self.tau <= 1.0:
            raise ValueError(f"Judge.tau={self.tau}; allowed: (0, 1]")

    @property
    def label(self) -> str:
        orders = ",both_orders" if self.both_orders else ""
        return f"{self.domain},m={self.budget_multiple},think={self.max_new_tokens}{orders}"


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


@dataclasses.dataclass(frozen=True)
class LongCoT:
    """A single long chain of thought with `max_new_tokens` output tokens."""

    max_new_tokens: int = 512

    def __post_init__(self):
        _positive(self, "max_new_tokens")

    @property
    def label(self) -> str:
        return f"long_cot(budget={self.max_new_tokens})"


@dataclasses.dataclass(frozen=True)
class SR:
    """Sequential refinement: one solve, then `rounds` refinements of the previous answer."""

    rounds: int = 2
    error_analysis: bool = False
    max_new_tokens: int = 512
    candidate_max_tokens: int = 512
    truncation_head: int = 128
    quote_thinking: bool = False

    def __post_init__(self):
        _positive(self, "rounds", "max_new_tokens", "candidate_max_tokens")
        _check_truncation(self)
        _check_bool(self, "quote_thinking")

    @property
    def label(self) -> str:
        ea = ",error_analysis" if self.error_analysis else ""
        return f"sr(rounds={self.rounds}{ea}{_thinking(self)},budget={self.max_new_tokens})"


@dataclasses.dataclass(frozen=True)
class PDR:
    """Parallel-Distill-Refine with schedule (M_1, ..., M_R), M_R = 1 (paper §3.2).

    Distill variants (paper §3.2, Fig. 2b) and the `selector` each one takes:
    - `shared_topk` / `per_sample_topk`: the k candidates `selector` ranks first. A model
      ranker (`self_pointwise`, or `pairwise_v1`, our V1 extension) is the paper's top-k;
      `random` ranks at random, so the workspace is a random k (labelled `random-k`);
      an oracle admits only (in)correct candidates (paper §4.3, Figs. 6 and 8).
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

    def __post_init__(self):
        object.__setattr__(self, "schedule", tuple(int(m) for m in self.schedule))
        if len(self.schedule) < 2 or self.schedule[-1] != 1 or min(self.schedule) < 1:
            raise ValueError(f"PDR.schedule={self.schedule}; must have >= 2 rounds of positive sizes "
                             "and end with M_R = 1, e.g. (8, 4, 1)")
        if self.distill not in DISTILL_VARIANTS:
            raise ValueError(f"PDR.distill={self.distill!r}; allowed: {DISTILL_VARIANTS}")
        if self.selector not in SELECTORS:
            raise ValueError(f"PDR.selector={self.selector!r}; allowed: {SELECTORS}")
        if self.distill == "random_k" and self.selector != "random":
            raise ValueError(f"PDR.selector={self.selector!r} with distill='random_k': random-k draws its "
                             "candidates at random and runs no selector; allowed: 'random'")
        if self.distill == "global_summary" and self.selector in MODEL_SELECTORS:
            raise ValueError(f"PDR.selector={self.selector!r} with distill='global_summary': the summary "
                             f"reads its candidates unranked; allowed: 'random' (all candidates), "
                             f"{ORACLE_SELECTORS} (oracle selection into the summary)")
        _positive(self, "k", "kappa", "max_new_tokens", "candidate_max_tokens")
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

    @property
    def label(self) -> str:
        sched = "-".join(map(str, self.schedule))
        if self.distill == "global_summary":
            extra = f",kappa={self.kappa}"
            extra += f",sel={self.selector}" if self.selector in ORACLE_SELECTORS else ""
            extra += ",vote_counts" if self.summary_vote_counts else ""
        elif self.distill == "random_k":
            extra = f",k={self.k}"
        elif self.selector == "random":  # a random ranking: the "top-k" is a random k
            extra = f",k={self.k},random-k"
        else:
            extra = f",k={self.k},sel={self.selector}"
            extra += f"[{self.judge.label}]" if self.selector in MODEL_SELECTORS else ""
        return f"pdr({sched},{self.distill}{extra}{_thinking(self)},budget={self.max_new_tokens})"


@dataclasses.dataclass(frozen=True)
class BestOfN:
    """Draft N candidates in parallel and select one (V1-Infer, V1 §4, and its baselines).

    Selectors: `pointwise` (each candidate rated 1-10; ties to the lower index),
    `pairwise_v1` (uncertainty-guided Swiss tournament, B = m*N calls), `random` (random
    disjoint pairings at the same budget), `round_robin` (all C(N, 2) pairs) and
    `majority` (most frequent extracted answer; no judge calls).
    """

    n: int = 16
    selector: str = "pairwise_v1"
    max_new_tokens: int = 512
    candidate_max_tokens: int = 512
    truncation_head: int = 128
    judge: Judge = Judge()
    quote_thinking: bool = False

    def __post_init__(self):
        _positive(self, "n", "max_new_tokens", "candidate_max_tokens")
        if self.selector not in BEST_OF_N_SELECTORS:
            raise ValueError(f"BestOfN.selector={self.selector!r}; allowed: {BEST_OF_N_SELECTORS}")
        _check_truncation(self)
        object.__setattr__(self, "judge", as_judge(self.judge))
        _check_bool(self, "quote_thinking")

    @property
    def label(self) -> str:
        judged = "" if self.selector == "majority" else f"[{self.judge.label}]"
        return (f"best_of_n(n={self.n},sel={self.selector}{judged}{_thinking(self)},"
                f"budget={self.max_new_tokens})")


@dataclasses.dataclass(frozen=True)
class RSA:
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

    def __post_init__(self):
        _positive(self, "population", "subset", "loops", "max_new_tokens", "candidate_max_tokens")
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

    @property
    def label(self) -> str:
        prune = f",prune={self.prune_every}/keep={self.keep}" if self.prune_every else ""
        judged = f"[{self.judge.label}]" if self.prune_every or self.final == "pairwise_v1" else ""
        return (f"rsa(N={self.population},K={self.subset},T={self.loops}{prune},final={self.final}"
                f"{judged}{_thinking(self)},budget={self.max_new_tokens})")
