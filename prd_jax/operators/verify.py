"""In-graph candidate selection: judges, tournaments, majority vote, random, oracle.

`select(method, ...)` scores N candidates per problem, `[B, N]` (higher is better), and
returns the judge calls it made for the budgets. Scores are exact (ratings, mu, votes);
consumers rank them with `argmax` / stable `argsort`, so equal scores go to the lower
index, as in the V1 paper's pointwise baseline.

The V1-Infer tournaments (arXiv 2603.04304 §4, Alg. 2-4) run inside the compiled program: a
`lax.while_loop` makes one batched pairwise-judge call per tournament batch, and the
pairing between batches is the host code of `tournament.py` run through
`jax.pure_callback`. The callback is stateless: it replays the problem's tournament
(seeded per problem) with a judge that returns the ratings recorded so far, and returns
the batch the tournament asks for next. The in-graph and host tournaments are therefore
the same algorithm, call for call.

Budgets: a batch's calls run in parallel, so each batch puts the call that generates the
most tokens on the accepted path (B_seq counts sequential batches; ties go to the lower
call, and `b_seq_io` counts that same call's in + out); every judge call counts in B_total.
Pointwise ratings of N candidates are one parallel batch; the selected candidate's
rating call is on the path.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from prd_jax.operators import judges, tournament
from prd_jax.operators.budget import pointwise_slots
from prd_jax.operators.calls import ExtraCalls, fill, per_sample, problem_rows, rows, single
from prd_jax.operators.specs import SELECTORS

Array = jax.Array
METHODS = tuple(SELECTORS)  # the one selector vocabulary (specs.SELECTORS)
TOURNAMENTS = ("pairwise_v1", "pairwise_random", "round_robin")


@dataclasses.dataclass
class Selection:
    """Scores `[B, N]`, admission `[B, N]`, judge calls (ExtraCalls without a round) and
    judge parse failures `[B]`."""

    scores: Array
    admitted: Array
    calls: list
    unparsed: Array

    def extra(self, round_index: int) -> list:
        return [dataclasses.replace(c, round=round_index) for c in self.calls]


def judge_template(ctx, judge, kind: str):
    """The context's `kind` ("pairwise" / "pointwise") judge template; a `judge.domain` that
    is not the template set's domain raises naming both."""
    if judge.domain is not None and ctx.domain and judge.domain != ctx.domain:
        raise ValueError(f"Judge.domain={judge.domain!r} but the template set's judges assess {ctx.domain!r}; "
                         f"allowed: None or {ctx.domain!r} (or run with a template set of domain {judge.domain!r})")
    return ctx.templates[kind]


def _flat_candidates(cand_t, cand_l, spec, ctx):
    """Candidates `[B, N, L]` as a judge quotes them (`calls.single`: no thinking block)."""
    b, n, length = cand_t.shape
    (tok, lens), _ = single(cand_t.reshape(b * n, length), cand_l.reshape(b * n), spec, ctx)
    return tok.reshape(b, n, -1), lens.reshape(b, n)


def pointwise(lm, problems, cand_t, cand_l, key, judge, ctx, spec) -> Selection:
    """Rate each candidate 1..10 with the pointwise judge; score = rating (V1's pointwise
    self-verification baseline, compared with V1-Infer in §4)."""
    b, n, _ = cand_t.shape
    tok, lens = _flat_candidates(cand_t, cand_l, spec, ctx)
    segs = fill(judge_template(ctx, judge, "pointwise"), b * n,
                {"problem": problem_rows(problems, n), "candidate": [(tok.reshape(b * n, -1), lens.reshape(-1))]})
    r = judges.rate(lm, segs, per_sample(key, n), ctx, judge, "pointwise")
    scores = r.rating[:, 0].reshape(b, n)
    rated, ratings = pointwise_slots(scores)  # call j rated candidate j
    calls = [ExtraCalls(0, "rating", r.in_tokens.reshape(b, n), r.out_tokens.reshape(b, n),
                        candidates=rated, ratings=ratings)]
    return Selection(scores, jnp.ones((b, n), bool), calls, r.forced.reshape(b, n).sum(1).astype(jnp.int32))


# ----------------------------------------------------------------------------- tournaments

class _Stop(Exception):
    def __init__(self, batch):
        self.batch = batch


def _drive(method: str, n: int, budget: int, judge, seed: int, judge_fn):
    if method == "pairwise_v1":
        return tournament.swiss_tournament(n, judge_fn, budget, seed=seed, d_min=judge.d_min,
                                           window=judge.window, tau=judge.tau, both_orders=judge.both_orders)
    if method == "pairwise_random":
        return tournament.random_pairing(n, judge_fn, budget, seed=seed, tau=judge.tau)
    return tournament.round_robin(n, judge_fn, tau=judge.tau, budget=budget)


def replay(method: str, n: int, budget: int, judge, seed: int, history: list):
    """Re-run a tournament whose first batches were judged `history` (list of
    (pairs, ratings)); returns (next batch of pairs, None) or ([], TournamentResult)."""
    step = [0]

    def judge_fn(pairs):
        if step[0] == len(history):
            raise _Stop(pairs)
        seen_pairs, ratings = history[step[0]]
        if [tuple(p) for p in pairs] != [tuple(p) for p in seen_pairs]:
            raise RuntimeError(f"tournament replay diverged at batch {step[0]}: {pairs} != {seen_pairs}")
        step[0] += 1
        return ratings

    try:
        return [], _drive(method, n, budget, judge, seed, judge_fn)
    except _Stop as stop:
        return stop.batch, None


def _host_step(method, n, budget, judge, width, seeds, hist_pairs, hist_ratings, hist_count, t):
    """Callback: the next batch `[B, W, 2]` (-1 padded), its size `[B]` and final mu `[B, N]`."""
    seeds, hist_pairs, hist_ratings, hist_count = map(np.asarray, (seeds, hist_pairs, hist_ratings, hist_count))
    b = len(seeds)
    pairs = np.full((b, width, 2), -1, np.int32)
    count = np.zeros((b,), np.int32)
    mu = np.full((b, n), 0.5, np.float32)
    for i in range(b):
        history = [([tuple(p) for p in hist_pairs[i, s, :hist_count[i, s]]],
                    [tuple(float(x) for x in r) for r in hist_ratings[i, s, :hist_count[i, s]]])
                   for s in range(int(t))]
        batch, result = replay(method, n, budget, judge, int(seeds[i]), history)
        if batch:
            pairs[i, :len(batch)] = batch
            count[i] = len(batch)
        else:
            mu[i] = result.mu
    return pairs, count, mu


def tournament_budget(method: str, n: int, judge) -> tuple:
    """(judge-call budget, calls per batch W, max batches) for a tournament over n."""
    cost = 2 if (judge.both_orders and method == "pairwise_v1") else 1
    if method == "round_robin":
        budget = n * (n - 1) // 2
        return budget, n // 2, max(1, len(tournament.circle_rounds(n)))
    budget = judge.budget_multiple * n
    return budget, (n // 2) * cost, max(1, budget // cost)


def pairwise(lm, problems, cand_t, cand_l, key, judge, ctx, spec, method: str) -> Selection:
    """Pairwise-judge tournament (`pairwise_v1`, `pairwise_random`, `round_robin`); score = mu."""
    b, n, _ = cand_t.shape
    if n < 2:
        return Selection(jnp.zeros((b, n)), jnp.ones((b, n), bool), [], jnp.zeros((b,), jnp.int32))
    budget, w, t_max = tournament_budget(method, n, judge)
    tok, lens = _flat_candidates(cand_t, cand_l, spec, ctx)
    seeds = jax.vmap(lambda k: jax.random.randint(k, (), 0, 2 ** 31 - 1))(key)
    host = functools.partial(_host_step, method, n, budget, judge, w)
    shapes = (jax.ShapeDtypeStruct((b, w, 2), jnp.int32), jax.ShapeDtypeStruct((b,), jnp.int32),
              jax.ShapeDtypeStruct((b, n), jnp.float32))
    tpl = judge_template(ctx, judge, "pairwise")
    prob = problem_rows(problems, w)

    def side(idx, valid):
        t = jnp.take_along_axis(tok, jnp.maximum(idx, 0)[:, :, None], axis=1)
        length = jnp.take_along_axis(lens, jnp.maximum(idx, 0), axis=1) * valid
        return t.reshape(b * w, -1), length.reshape(-1)

    def body(state):
        t, pairs, count, hp, hr, hc, log_in, log_out, unparsed = state
        valid = jnp.arange(w)[None, :] < count[:, None]
        segs = fill(tpl, b * w, {"problem": prob, "candidate_a": [side(pairs[..., 0], valid)],
                                 "candidate_b": [side(pairs[..., 1], valid)]})
        r = judges.rate(lm, segs, per_sample(jax.vmap(jax.random.fold_in, (0, None))(key, t), w),
                        ctx, judge, "pairwise", name=f"judge.pairwise[{budget} calls]",
                        live=valid.reshape(-1))  # traced once
        hp, hr, hc = hp.at[:, t].set(pairs), hr.at[:, t].set(r.rating.reshape(b, w, 2)), hc.at[:, t].set(count)
        log_in = log_in.at[:, t].set(r.in_tokens.reshape(b, w) * valid)
        log_out = log_out.at[:, t].set(r.out_tokens.reshape(b, w) * valid)
        unparsed = unparsed + jnp.sum(r.forced.reshape(b, w) & valid, axis=1)
        pairs, count, _ = jax.pure_callback(host, shapes, seeds, hp, hr, hc, t + 1)
        return t + 1, pairs, count, hp, hr, hc, log_in, log_out, unparsed

    pairs, count, _ = jax.pure_callback(host, shapes, seeds, jnp.full((b, t_max, w, 2), -1, jnp.int32),
                                        jnp.zeros((b, t_max, w, 2), jnp.float32),
                                        jnp.zeros((b, t_max), jnp.int32), 0)
    zeros = jnp.zeros((b, t_max, w), jnp.int32)
    state = (jnp.int32(0), pairs, count, jnp.full((b, t_max, w, 2), -1, jnp.int32),
             jnp.zeros((b, t_max, w, 2), jnp.float32), jnp.zeros((b, t_max), jnp.int32), zeros, zeros,
             jnp.zeros((b,), jnp.int32))
    t, _, _, hp, hr, hc, log_in, log_out, unparsed = jax.lax.while_loop(
        lambda s: (s[0] < t_max) & jnp.any(s[2] > 0), body, state)
    _, _, mu = jax.pure_callback(host, shapes, seeds, hp, hr, hc, t)
    longest = jnp.argmax(log_out, axis=2)  # [B, T]: the batch's latency-bound call (most generated)
    accepted = (jnp.arange(w)[None, None, :] == longest[:, :, None]) & (hc[:, :, None] > 0)
    calls = [ExtraCalls(0, "judge", log_in.reshape(b, -1), log_out.reshape(b, -1), accepted.reshape(b, -1),
                        candidates=hp.reshape(b, -1, 2), ratings=hr.reshape(b, -1, 2))]  # slot A, slot B
    return Selection(mu, jnp.ones((b, n), bool), calls, unparsed)


# ----------------------------------------------------------------------------- no judge

def majority(cand_t, cand_l, ctx) -> Selection:
    """Majority vote over extracted final answers (math); score = votes of own answer."""
    b, n, length = cand_t.shape
    ids = jax.pure_callback(ctx.answer_ids, jax.ShapeDtypeStruct((b, n), jnp.int32), cand_t, cand_l)
    votes = jnp.sum((ids[:, :, None] == ids[:, None, :]) & (ids[:, None, :] >= 0), axis=2)
    votes = jnp.where(ids >= 0, votes, 0).astype(jnp.float32)
    return Selection(votes, jnp.ones((b, n), bool), [], jnp.zeros((b,), jnp.int32))


def oracle(problems, cand_t, cand_l, ctx, want_correct: bool) -> Selection:
    """Ground-truth admission: the PDR paper's oracle workspaces (§4.1 and App. D.1, Figs. 6
    and 8), correct-only (`want_correct`) or incorrect-only."""
    if ctx.grader is None:
        raise ValueError("oracle selectors need Context.grader (ground-truth grading)")
    b, n, length = cand_t.shape

    def host(ct, cl, at, al):
        return np.asarray(ctx.grader.correct(ct, cl, at, al), dtype=bool)

    correct = jax.pure_callback(host, jax.ShapeDtypeStruct((b * n,), jnp.bool_),
                                cand_t.reshape(b * n, length), cand_l.reshape(b * n),
                                rows(problems.answer_tokens, n), rows(problems.answer_lengths, n)).reshape(b, n)
    admitted = correct if want_correct else ~correct
    return Selection(admitted.astype(jnp.float32), admitted, [], jnp.zeros((b,), jnp.int32))


def select(method: str, lm, problems, cand_t, cand_l, key, judge, ctx, spec) -> Selection:
    """Score candidates `[B, N, L]` by selector `method` (one of `specs.SELECTORS`; `random`
    scores uniformly at random, so its argmax / top-k is a uniformly random pick)."""
    b, n, _ = cand_t.shape
    if method == "self_pointwise":
        return pointwise(lm, problems, cand_t, cand_l, key, judge, ctx, spec)
    if method in TOURNAMENTS:
        return pairwise(lm, problems, cand_t, cand_l, key, judge, ctx, spec, method)
    if method == "majority":
        return majority(cand_t, cand_l, ctx)
    if method == "random":
        scores = jax.vmap(lambda k: jax.random.uniform(k, (n,)))(key)
        return Selection(scores, jnp.ones((b, n), bool), [], jnp.zeros((b,), jnp.int32))
    if method in ("oracle_correct", "oracle_incorrect"):
        return oracle(problems, cand_t, cand_l, ctx, method == "oracle_correct")
    raise ValueError(f"selection method {method!r}; allowed: {METHODS}")


def top(selection: Selection, k: Optional[int] = None) -> Array:
    """Indices `[B, k]` by descending score (all N if k is None)."""
    order = jnp.argsort(-selection.scores, axis=1, stable=True)
    return order if k is None else order[:, :k]
