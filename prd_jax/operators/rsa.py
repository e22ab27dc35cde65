"""Recursive self-aggregation (RSA), V1's population baseline (arXiv 2603.04304 §4), with
V1's verify-and-prune variant.

A population of N drafts is replaced T times by aggregations of K members drawn at random.
Budgets: RSA's accepted path walks back from the final member through each member's first
drawn parent, as PDR's random-k does; tournament calls count in B_total and their
sequential batches in B_seq (`verify.py`). Quoted subsets drop their thinking block unless
`spec.budget.quote_thinking` (`calls.quotable`).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from prd_jax.operators import verify
from prd_jax.operators.best_of_n import drafts, pick
from prd_jax.operators.calls import call, candidate_list, fill, fold, path_calls, per_sample, problem_rows, rows
from prd_jax.operators.core import Context, OperatorResult, Problems, empty_workspace, make_result
from prd_jax.operators.registry import register_operator
from prd_jax.operators.specs import (RSA_FINALS, CallBudget, Judge, OperatorSpec, as_judge, check_positive, flat_budget,
                                     labelled, thinking_label)

Array = jax.Array


@flat_budget("population", "subset", "loops", "max_new_tokens", "candidate_max_tokens", "truncation_head",
             "prune_every", "keep", "final", "judge", "quote_thinking", "think_budget")
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
    prune_every: int = 0
    keep: int = 0
    final: str = "first"
    judge: Judge = Judge()
    budget: CallBudget = CallBudget()

    TEMPLATES = ("solve", "rsa_aggregate", "pairwise")

    def __post_init__(self):
        check_positive(self, "population", "subset", "loops")
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
                                      f"final={self.final}{judged}", thinking_label(self)[1:]], shown)


def _draw_subsets(key, admitted, n: int, k: int):
    """Per new member, k distinct parents drawn uniformly, admitted ones first `[B, n, k]`."""
    noise = jax.vmap(lambda kk: jax.random.uniform(kk, (n, n)))(key)
    noise = noise + 2.0 * (~admitted)[:, None, :]
    return jnp.argsort(noise, axis=2)[:, :, :k]


@register_operator("rsa", spec=RSA)
def rsa(lm, problems: Problems, key: Array, spec: RSA, ctx: Context) -> OperatorResult:
    """Recursive self-aggregation over `spec.loops` loops, with optional verify-and-prune."""
    b, n, k = problems.tokens.shape[0], spec.population, spec.subset
    cand_t, cand_l, in_tok, out_tok, truncs = drafts(lm, problems, key, spec, ctx, n)
    gen, parents, extra = [(in_tok, out_tok, "draft")], [None], []
    unparsed = jnp.zeros((b,), jnp.int32)
    rounds_t, rounds_l = [cand_t], [cand_l]
    tpl = ctx.templates["rsa_aggregate"]
    for t in range(1, spec.loops + 1):
        lkey = fold(key, t + 1)
        admitted = jnp.ones((b, n), bool)
        if spec.prune_every and t % spec.prune_every == 0:
            sel = verify.select("pairwise_v1", lm, problems, cand_t, cand_l, fold(lkey, 11), spec.judge, ctx, spec)
            rank = jnp.argsort(verify.top(sel), axis=1)  # position of each candidate in the ranking
            admitted = rank < spec.keep
            extra += sel.extra(t)
            unparsed = unparsed + sel.unparsed
        idx = _draw_subsets(fold(lkey, 13), admitted, n, k)  # [B, n, k]
        adm = jnp.take_along_axis(jnp.broadcast_to(admitted[:, None, :], (b, n, n)), idx, axis=2)
        cands, cut = candidate_list(tpl, rows(cand_t, n), rows(cand_l, n), idx.reshape(b * n, k),
                                    adm.reshape(b * n, k), spec, ctx)
        segs = fill(tpl, b * n, {"problem": problem_rows(problems, n), "candidates": cands})
        out = call(lm, segs, per_sample(lkey, n), ctx, spec.budget.max_new_tokens, 1, "rsa.aggregate",
                   spec.budget.think_budget)
        tok, length, in_t, over = out
        truncs = truncs + (cut + over).reshape(b, n).sum(axis=1)
        cand_t, cand_l = tok.reshape(b, n, -1), length.reshape(b, n)
        gen.append((in_t.reshape(b, n), out.bill_out.reshape(b, n), "aggregate"))
        parents.append(idx[:, :, 0])
        rounds_t.append(cand_t)
        rounds_l.append(cand_l)
    final = jnp.zeros((b,), jnp.int32)
    if spec.final != "first":
        sel = verify.select(spec.final, lm, problems, cand_t, cand_l, fold(key, 0), spec.judge, ctx, spec)
        final = jnp.argmax(sel.scores, axis=1)
        extra += sel.extra(spec.loops + 1)
        unparsed = unparsed + sel.unparsed
    calls = path_calls(gen, parents, extra, final)
    final_t, final_l = pick(cand_t, cand_l, final)
    return make_result(final_t, final_l, calls, empty_workspace(b), truncs, rounds_t, rounds_l, unparsed)
