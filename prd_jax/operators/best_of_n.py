"""Best-of-N: draft N candidates in parallel and return the one a selector ranks first
(V1-Infer, arXiv 2603.04304 §4, with the V1 Swiss tournament and its baselines).

Budgets: the N drafts are parallel and the selected one is on the accepted path; judge
calls count in B_total, and the selector's sequential batches add to B_seq (`verify.py`).
Judged candidates drop their thinking block unless `spec.budget.quote_thinking` (`calls.quotable`).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from prd_jax.operators import verify
from prd_jax.operators.calls import call, fill, fold, path_calls, problem_rows
from prd_jax.operators.core import Context, OperatorResult, Problems, empty_workspace, make_result
from prd_jax.operators.registry import register_operator
from prd_jax.operators.specs import (BEST_OF_N_SELECTORS, JUDGE_SELECTORS, CallBudget, Judge, OperatorSpec, as_judge,
                                     check_positive, flat_budget, judge_roles, labelled, thinking_label)

Array = jax.Array


@flat_budget("n", "selector", "max_new_tokens", "candidate_max_tokens", "truncation_head", "judge", "quote_thinking",
             "think_budget")
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
    judge: Judge = Judge()
    budget: CallBudget = CallBudget()

    TEMPLATES = ("solve", "pointwise", "pairwise")

    def __post_init__(self):
        check_positive(self, "n")
        if self.selector not in BEST_OF_N_SELECTORS:
            raise ValueError(f"BestOfN.selector={self.selector!r}; allowed: {BEST_OF_N_SELECTORS}")
        object.__setattr__(self, "judge", as_judge(self.judge))

    def template_roles(self) -> tuple:
        return ("solve",) + judge_roles(self.selector)

    @property
    def label(self) -> str:
        judged = f"[{self.judge.label}]" if self.selector in JUDGE_SELECTORS else ""
        shown = {"n", "selector", "quote_thinking"} | ({"judge"} if judged else set())
        return labelled(self, "best_of_n", [f"n={self.n}", f"sel={self.selector}{judged}", thinking_label(self)[1:]],
                        shown)


def drafts(lm, problems, key, spec, ctx, n: int):
    """`n` parallel solve calls per problem: candidates `[B, n, L]`, lengths, billed in / out
    tokens `[B, n]` and overflow counts `[B]` (best-of-N and RSA's first population)."""
    b = problems.tokens.shape[0]
    segs = fill(ctx.templates["solve"], b, {"problem": problem_rows(problems, 1)})
    out = call(lm, segs, fold(key, 1), ctx, spec.budget.max_new_tokens, n, f"{type(spec).__name__.lower()}.sample",
               spec.budget.think_budget)
    tok, length, in_tok, overflow = out
    return (tok.reshape(b, n, -1), length.reshape(b, n), in_tok.reshape(b, n), out.bill_out.reshape(b, n),
            overflow.astype(jnp.int32))


def pick(cand_t, cand_l, index):
    """Row `index[b]` of each problem's candidates: tokens `[B, L]`, lengths `[B]`."""
    tok = jnp.take_along_axis(cand_t, index[:, None, None], axis=1)[:, 0]
    return tok, jnp.take_along_axis(cand_l, index[:, None], axis=1)[:, 0]


@register_operator("best_of_n", spec=BestOfN)
def best_of_n(lm, problems: Problems, key: Array, spec: BestOfN, ctx: Context) -> OperatorResult:
    """Draft `spec.n` candidates and return the one `spec.selector` ranks first."""
    b = problems.tokens.shape[0]
    cand_t, cand_l, in_tok, out_tok, truncs = drafts(lm, problems, key, spec, ctx, spec.n)
    sel = verify.select(spec.selector, lm, problems, cand_t, cand_l, fold(key, 2),
                        spec.judge, ctx, spec)
    best = jnp.argmax(sel.scores, axis=1)
    calls = path_calls([(in_tok, out_tok, "draft")], [None], sel.extra(1), best)
    final_t, final_l = pick(cand_t, cand_l, best)
    return make_result(final_t, final_l, calls, empty_workspace(b), truncs, [cand_t], [cand_l], sel.unparsed)
