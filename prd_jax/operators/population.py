"""Population operators: best-of-N with a selector, and RSA (V1-Infer, arXiv 2603.04304 §4,
and its RSA baseline).

Both are pure functions `(lm, problems, keys, spec, ctx) -> OperatorResult`, like the
PDR operators, and run as one compiled program.

Budgets: the N drafts are parallel, the selected one is on the accepted path; judge
calls count in B_total, and the selector's sequential batches add to B_seq (see
`verify.py`). RSA's accepted path walks back from the final member through each
member's first drawn parent, as PDR's random-k does. Quoted candidates (judges, RSA
subsets) drop their thinking block unless `spec.quote_thinking` (`calls.quotable`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from prd_jax.operators import verify
from prd_jax.operators.calls import (call, candidate_list, fill, fold, path_calls, per_sample,
                                     problem_rows, rows)
from prd_jax.operators.core import Context, OperatorResult, Problems, empty_workspace, make_result
from prd_jax.operators.registry import register_operator
from prd_jax.operators.specs import RSA, BestOfN

Array = jax.Array

def _drafts(lm, problems, key, spec, ctx, n: int):
    b = problems.tokens.shape[0]
    segs = fill(ctx.templates["solve"], b, {"problem": problem_rows(problems, 1)})
    out = call(lm, segs, fold(key, 1), ctx, spec.max_new_tokens, n, f"{type(spec).__name__.lower()}.sample", spec.think_budget)
    tok, length, in_tok, overflow = out
    return (tok.reshape(b, n, -1), length.reshape(b, n), in_tok.reshape(b, n), out.bill_out.reshape(b, n),
            overflow.astype(jnp.int32))


def _pick(cand_t, cand_l, index):
    tok = jnp.take_along_axis(cand_t, index[:, None, None], axis=1)[:, 0]
    return tok, jnp.take_along_axis(cand_l, index[:, None], axis=1)[:, 0]


@register_operator("best_of_n", spec=BestOfN)
def best_of_n(lm, problems: Problems, key: Array, spec: BestOfN, ctx: Context) -> OperatorResult:
    """Draft `spec.n` candidates and return the one `spec.selector` ranks first."""
    b = problems.tokens.shape[0]
    cand_t, cand_l, in_tok, out_tok, truncs = _drafts(lm, problems, key, spec, ctx, spec.n)
    sel = verify.select(spec.selector, lm, problems, cand_t, cand_l, fold(key, 2),
                        spec.judge, ctx, spec)
    best = jnp.argmax(sel.scores, axis=1)
    calls = path_calls([(in_tok, out_tok, "draft")], [None], sel.extra(1), best)
    final_t, final_l = _pick(cand_t, cand_l, best)
    return make_result(final_t, final_l, calls, empty_workspace(b), truncs, [cand_t], [cand_l], sel.unparsed)


def _draw_subsets(key, admitted, n: int, k: int):
    """Per new member, k distinct parents drawn uniformly, admitted ones first `[B, n, k]`."""
    noise = jax.vmap(lambda kk: jax.random.uniform(kk, (n, n)))(key)
    noise = noise + 2.0 * (~admitted)[:, None, :]
    return jnp.argsort(noise, axis=2)[:, :, :k]


@register_operator("rsa", spec=RSA)
def rsa(lm, problems: Problems, key: Array, spec: RSA, ctx: Context) -> OperatorResult:
    """Recursive self-aggregation over `spec.loops` loops, with optional verify-and-prune."""
    b, n, k = problems.tokens.shape[0], spec.population, spec.subset
    cand_t, cand_l, in_tok, out_tok, truncs = _drafts(lm, problems, key, spec, ctx, n)
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
        out = call(lm, segs, per_sample(lkey, n), ctx, spec.max_new_tokens, 1, "rsa.aggregate", spec.think_budget)
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
    final_t, final_l = _pick(cand_t, cand_l, final)
    return make_result(final_t, final_l, calls, empty_workspace(b), truncs, rounds_t, rounds_l, unparsed)

