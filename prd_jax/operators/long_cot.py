"""Long-CoT: one call with the whole budget (the PDR paper's single-pass baseline,
arXiv 2510.01123 §4). B_seq = B_total = the call's generated tokens."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from prd_jax.operators.budget import CallLog, group
from prd_jax.operators.calls import call, fill, fold, problem_rows
from prd_jax.operators.core import Context, OperatorResult, Problems, empty_workspace, make_result
from prd_jax.operators.registry import register_operator
from prd_jax.operators.specs import CallBudget, OperatorSpec, flat_budget, labelled

Array = jax.Array


@flat_budget("max_new_tokens", "think_budget")
@dataclasses.dataclass(frozen=True)
class LongCoT(OperatorSpec):
    """A single long chain of thought with `budget.max_new_tokens` output tokens (PDR §4
    baseline); of its budget it uses `max_new_tokens` and `think_budget` (it quotes nothing)."""

    budget: CallBudget = CallBudget()

    TEMPLATES = ("solve",)

    def round_sizes(self) -> tuple:
        return (1,)

    @property
    def label(self) -> str:
        return labelled(self, "long_cot", [], ())


@register_operator("long_cot", spec=LongCoT)
def long_cot(lm, problems: Problems, key: Array, spec: LongCoT, ctx: Context) -> OperatorResult:
    """Single pass: one call with `spec.budget.max_new_tokens` (paper's Long-CoT baseline)."""
    b = problems.tokens.shape[0]
    segs = fill(ctx.templates["solve"], b, {"problem": problem_rows(problems, 1)})
    out = call(lm, segs, fold(key, 1), ctx, spec.budget.max_new_tokens, 1, "long_cot.solve",
               spec.budget.think_budget)
    tok, length, in_tok, overflow = out
    calls = CallLog.from_groups([group(in_tok[:, None], out.bill_out[:, None], jnp.ones((b, 1), bool), "solve")])
    return make_result(tok, length, calls, empty_workspace(b), overflow, [tok[:, None]], [length[:, None]],
                   traces=[out.trace(b, 1)] if ctx.trace else ())
