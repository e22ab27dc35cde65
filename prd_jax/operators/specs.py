"""Operator settings, validated at construction (PDR paper §3: Long-CoT, SR, PDR).

Specs are frozen dataclasses: hashable, so they are static arguments of the jitted
operator programs. Each error names the field and says what is allowed.
"""

from __future__ import annotations

import dataclasses
from typing import Tuple

DISTILL_VARIANTS = ("global_summary", "shared_topk", "per_sample_topk", "random_k")
SELECTORS = ("self_pointwise", "random", "oracle_correct", "oracle_incorrect")


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

    def __post_init__(self):
        _positive(self, "rounds", "max_new_tokens", "candidate_max_tokens")
        if not 0 <= self.truncation_head <= self.candidate_max_tokens:
            raise ValueError(f"SR.truncation_head={self.truncation_head}; allowed: 0..candidate_max_tokens")

    @property
    def label(self) -> str:
        ea = ",error_analysis" if self.error_analysis else ""
        return f"sr(rounds={self.rounds}{ea},budget={self.max_new_tokens})"


@dataclasses.dataclass(frozen=True)
class PDR:
    """Parallel-Distill-Refine with schedule (M_1, ..., M_R), M_R = 1 (paper §3.2).

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

    def __post_init__(self):
        object.__setattr__(self, "schedule", tuple(int(m) for m in self.schedule))
        if len(self.schedule) < 2 or self.schedule[-1] != 1 or min(self.schedule) < 1:
            raise ValueError(f"PDR.schedule={self.schedule}; must have >= 2 rounds of positive sizes "
                             "and end with M_R = 1, e.g. (8, 4, 1)")
        if self.distill not in DISTILL_VARIANTS:
            raise ValueError(f"PDR.distill={self.distill!r}; allowed: {DISTILL_VARIANTS}")
        if self.selector not in SELECTORS:
            raise ValueError(f"PDR.selector={self.selector!r}; allowed: {SELECTORS}")
        _positive(self, "k", "kappa", "max_new_tokens", "candidate_max_tokens")
        if self.distill != "global_summary" and self.k > min(self.schedule[:-1]):
            raise ValueError(f"PDR.k={self.k} exceeds the smallest distilled round M="
                             f"{min(self.schedule[:-1])} of schedule {self.schedule}; need k <= M")
        if not 0 <= self.truncation_head <= self.candidate_max_tokens:
            raise ValueError(f"PDR.truncation_head={self.truncation_head}; allowed: 0..candidate_max_tokens")
        if self.refine_template not in ("topk", "previous"):
            raise ValueError(f"PDR.refine_template={self.refine_template!r}; allowed: 'topk', 'previous'")
        if self.refine_template == "previous" and (self.k != 1 or self.distill == "global_summary"):
            raise ValueError("PDR.refine_template='previous' needs k=1 and an extractive distill")

    @property
    def label(self) -> str:
        sched = "-".join(map(str, self.schedule))
        extra = f",kappa={self.kappa}" if self.distill == "global_summary" else f",k={self.k},sel={self.selector}"
        return f"pdr({sched},{self.distill}{extra},budget={self.max_new_tokens})"
