"""Sequential refinement (the PDR paper, arXiv 2510.01123 §3.2.1): one solve, then `rounds`
refinements of the previous answer, with or without an error analysis first. Every call is on
the accepted path, so B_seq = B_total. Quoted answers drop their thinking block unless
`spec.budget.quote_thinking` (`calls.quotable`)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from prd_jax.operators.assembly import assemble
from prd_jax.operators.budget import CallLog, group
from prd_jax.operators.calls import call, fill, fold, problem_rows, single
from prd_jax.operators.core import Context, OperatorResult, Problems, empty_workspace, make_result
from prd_jax.operators.registry import register_operator
from prd_jax.operators.specs import (CallBudget, OperatorSpec, check_bool, check_positive, flat_budget, labelled,
                                     thinking_label)

Array = jax.Array


@flat_budget("rounds", "error_analysis", "max_new_tokens", "candidate_max_tokens", "truncation_head", "quote_thinking",
             "think_budget")
@dataclasses.dataclass(frozen=True)
class SR(OperatorSpec):
    """Sequential refinement (PDR §3.2.1): one solve, then `rounds` refinements of the previous answer."""

    rounds: int = 2
    error_analysis: bool = False
    budget: CallBudget = CallBudget()

    TEMPLATES = ("solve", "sr_refine", "sr_error_analysis")

    def __post_init__(self):
        check_positive(self, "rounds")
        check_bool(self, "error_analysis")

    def template_roles(self) -> tuple:
        return ("solve", "sr_error_analysis" if self.error_analysis else "sr_refine")

    def round_sizes(self) -> tuple:
        return (1,) * (self.rounds + 1)

    @property
    def label(self) -> str:
        ea = "error_analysis" if self.error_analysis else ""
        return labelled(self, "sr", [f"rounds={self.rounds}", ea, thinking_label(self)[1:]],
                        ("rounds", "error_analysis", "quote_thinking"))


@register_operator("sr", spec=SR)
def sr(lm, problems: Problems, key: Array, spec: SR, ctx: Context) -> OperatorResult:
    """Sequential refinement (paper §3.2.1): solve, then refine the previous answer `rounds` times.

    Every call is on the accepted path, so B_seq = B_total. With `ctx.trace`, one
    RoundTrace per call (M = 1), as Long-CoT and PDR return them.
    """
    b = problems.tokens.shape[0]
    problem = problem_rows(problems, 1)
    segs = fill(ctx.templates["solve"], b, {"problem": problem})
    out = call(lm, segs, fold(key, 1), ctx, spec.budget.max_new_tokens, 1, "sr.solve", spec.budget.think_budget)
    tok, length, in_tok, overflow = out
    groups = [group(in_tok[:, None], out.bill_out[:, None], jnp.ones((b, 1), bool), "solve")]
    truncs, rounds_t, rounds_l = overflow.astype(jnp.int32), [tok[:, None]], [length[:, None]]
    traces = [out.trace(b, 1)]
    refine = ctx.templates["sr_error_analysis" if spec.error_analysis else "sr_refine"]
    workspace = empty_workspace(b)
    for r in range(2, spec.rounds + 2):
        workspace, cut = single(tok, length, spec, ctx)
        segs = fill(refine, b, {"problem": problem, "previous": [workspace]})
        out = call(lm, segs, fold(key, r), ctx, spec.budget.max_new_tokens, 1, "sr.refine", spec.budget.think_budget)
        tok, length, in_tok, overflow = out
        groups.append(group(in_tok[:, None], out.bill_out[:, None], jnp.ones((b, 1), bool), "refine"))
        truncs = truncs + cut + overflow
        rounds_t.append(tok[:, None])
        rounds_l.append(length[:, None])
        traces.append(out.trace(b, 1))
    workspace = assemble([workspace], workspace[0].shape[1], ctx.pad_id)[:2]  # left-padded, as PDR's
    return make_result(tok, length, CallLog.from_groups(groups), workspace, truncs, rounds_t, rounds_l,
                       traces=traces if ctx.trace else ())
