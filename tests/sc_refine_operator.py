"""A test-only operator, defined entirely outside the library: self-consistency, then refine.

Draw `n` solutions in parallel, majority-vote their final answers with the context's answer
grouper (`verify.majority`, ties to the lowest index), then make one refine call on the
majority candidate with this module's own template role `sc_refine`. It combines the
self-consistency baseline with the SR refine step of the PDR paper (arXiv 2510.01123 §3.1):
B_seq counts the majority draft and the refine call; B_total every call.

Registering it (importing this module) is all eval (`{"type": "sc_refine", ...}`) and
operator RL (`config.rl.operator = dict(type="sc_refine", ...)`) need. docs/extending.md ("An
operator") walks through it.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from prd_jax import prompts
from prd_jax.operators import verify
from prd_jax.operators.assembly import assemble
from prd_jax.operators.calls import call, fill, fold, path_calls, problem_rows, single
from prd_jax.operators.core import make_result
from prd_jax.operators.registry import register_operator
from prd_jax.operators.specs import CallBudget, OperatorSpec, flat_budget, labelled

# The operator's own prompt, one per template set it runs with.
for set_name, text in {
        "default": ("Here is a problem and the answer most of several attempts agree on. It is unverified. "
                    "Check it step by step, fix what is wrong, and put your final answer in \\boxed{{}}."
                    "\n\nProblem:\n{problem}\n\nMajority attempt:\n{previous}"),
        "compact": "Check majority: {problem}\nMajority:\n{previous}",
        "code": ("Here is a programming task and the program most of several attempts agree on. It is "
                 "unverified. Check it, fix what is wrong, and write the complete function in one ```python "
                 "fenced block.\n\nTask:\n{problem}\n\nMajority program:\n{previous}")}.items():
    prompts.add_template(set_name, prompts.Template("sc_refine", text))


@flat_budget()
@dataclasses.dataclass(frozen=True)
class SCRefine(OperatorSpec):
    """Settings of self-consistency-then-refine (this module's docstring). The call budget
    (`max_new_tokens`, candidate truncation, ...) is the library's `CallBudget`, validated
    there; `flat_budget()` lets the constructor take its fields flat, as a config gives them
    (`dict(type="sc_refine", n=4, max_new_tokens=64)`)."""

    n: int = 4
    budget: CallBudget = CallBudget()

    TEMPLATES = ("solve", "sc_refine")

    def __post_init__(self):
        if self.n < 1:
            raise ValueError(f"SCRefine.n={self.n}; must be >= 1")

    def round_sizes(self) -> tuple:
        return (self.n, 1)  # round 0: n drafts; round 1: one refine (operator RL trains it)

    @property
    def label(self) -> str:
        return labelled(self, "sc_refine", [f"n={self.n}"], ("n",))


@register_operator("sc_refine", spec=SCRefine)
def sc_refine(lm, problems, keys, spec: SCRefine, ctx):
    """n drafts -> majority vote (context grouper) -> one refine of the majority candidate."""
    b, n = problems.tokens.shape[0], spec.n
    problem = problem_rows(problems, 1)
    draft = call(lm, fill(ctx.templates["solve"], b, {"problem": problem}), fold(keys, 1), ctx,
                 spec.budget.max_new_tokens, n, "sc_refine.sample", spec.budget.think_budget)
    cand_t, cand_l = draft.tokens.reshape(b, n, -1), draft.lengths.reshape(b, n)
    best = jnp.argmax(verify.majority(cand_t, cand_l, ctx).scores, axis=1)  # [B], ties to the lowest index
    top_t = jnp.take_along_axis(cand_t, best[:, None, None], axis=1)[:, 0]
    top_l = jnp.take_along_axis(cand_l, best[:, None], axis=1)[:, 0]
    seg, cut = single(top_t, top_l, spec, ctx)
    refine = call(lm, fill(ctx.templates["sc_refine"], b, {"problem": problem, "previous": [seg]}),
                  fold(keys, 2), ctx, spec.budget.max_new_tokens, 1, "sc_refine.refine", spec.budget.think_budget)
    calls = path_calls([(draft.in_tokens.reshape(b, n), cand_l, "draft"),
                        (refine.in_tokens[:, None], refine.lengths[:, None], "refine")],
                       [None, best[:, None]], [], jnp.zeros((b,), jnp.int32))
    workspace = assemble([seg], seg[0].shape[1], ctx.pad_id)[:2]
    traces = [draft.trace(b, n), refine.trace(b, 1)] if ctx.trace else ()
    return make_result(refine.tokens, refine.lengths, calls, workspace, draft.overflow + cut + refine.overflow,
                       [cand_t, refine.tokens[:, None]], [cand_l, refine.lengths[:, None]], traces=traces)
