"""Uncertainty-adaptive PDR (`prd_jax/operators/adaptive_pdr.py`) on a scripted fake model:
budgets by hand (all stop after round 1, none stop, a mix), no refine for unanimous drafts,
the allocation within the cap, the `v1_mu` signal, bad settings named by field, and the
remote path (RemoteLM over an in-process fake endpoint) equal to the in-graph run."""

import dataclasses

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from prd_jax.operators import registry
from prd_jax.operators.adaptive_pdr import AdaptivePDR, allocate
from prd_jax.operators.runner import encode_problems, make_context, run_operator
from prd_jax.operators.specs import Sampling
from prd_jax.sampling import SampleOutput
from fakes import CharTokenizer

TOK = CharTokenizer()
NO_ANSWER = 7  # a candidate whose first token is 7 has no answer
N = 5  # every call's max_new_tokens


class FirstTokenGrouper:
    """Answer key = a candidate's first token (none when it is NO_ANSWER or the candidate is empty)."""

    def __call__(self, cand_tok, cand_len):
        first = np.asarray(cand_tok)[:, :, 0]
        return np.where((np.asarray(cand_len) > 0) & (first != NO_ANSWER), first, -1).astype(np.int32)


@flax.struct.dataclass
class ScriptLM:
    """Call `name` answers its row i (problem-major) with `script[name][i]` = (first token,
    length); every token of a row is its first token. Judges (no reasoning) read a flat
    next-token distribution: every forced rating is the same, so every mu is 0.5."""

    script: tuple = flax.struct.field(pytree_node=False)

    def generate(self, prompts, lengths, keys, scfg, fanout=True, name="", live=None):
        rows = prompts.shape[0] * scfg.num_samples
        table = dict(self.script)[name]
        assert len(table) == rows, (name, len(table), rows)
        tok = jnp.asarray([t for t, _ in table], jnp.int32)
        length = jnp.asarray([n for _, n in table], jnp.int32)
        tokens = jnp.broadcast_to(tok[:, None], (rows, scfg.max_new_tokens))
        return SampleOutput(tokens, jnp.zeros(tokens.shape), length, jnp.zeros((rows,), bool))

    def next_logits(self, prompts, lengths, name="", live=None):
        return jnp.zeros((prompts.shape[0], 256))


def ctx():
    return make_context(TOK, Sampling(), grouper=FirstTokenGrouper(), k_max=2)


def problems(b=2):
    return encode_problems(TOK, [f"q{i}?" for i in range(b)], ["0"] * b, max_problem_tokens=16)[0]


def spec(**kw):
    fields = dict(rounds=3, min_fanout=2, max_fanout=4, tau=1.0, k=2, max_new_tokens=N, candidate_max_tokens=N,
                  truncation_head=1)
    fields.update(kw)
    return AdaptivePDR(**fields)


def run(script, **kw):
    res = run_operator(ScriptLM(tuple((k, tuple(v)) for k, v in script.items())), problems(), jax.random.key(0),
                       spec(**kw), ctx())
    return res, res.b_seq.tolist(), res.b_total.tolist()


def calls_of(res, i, name):
    """(in, out) of problem i's calls named `name` that ran (any token)."""
    return [(int(a), int(b)) for n, a, b in zip(res.calls.names, res.calls.in_tokens[i], res.calls.out_tokens[i])
            if n == name and (a or b)]


FILL = [(99, N)] * 8  # rows of a call that must not run: if counted, they show up as 5 tokens each
LAST_FILL = [(99, N)] * 2


def test_all_stop_after_round_one():
    script = {"adaptive_pdr.draft": [(20, 3), (20, 4), (30, 5), (30, 2)],
              "adaptive_pdr.refine2": FILL, "adaptive_pdr.refine3": LAST_FILL}
    res, b_seq, b_total = run(script)
    assert b_total == [3 + 4, 5 + 2]
    assert b_seq == [3, 5]  # the agreed answer: the largest group's first member
    assert res.final_tokens[:, 0].tolist() == [20, 30]
    for i in range(2):  # unanimous drafts never pay for a refine call
        assert calls_of(res, i, "refine") == []
    solve_in = int(res.calls.in_tokens[0, 0])
    assert solve_in > 0 and res.b_total_io.tolist() == [2 * solve_in + 7, 2 * int(res.calls.in_tokens[1, 0]) + 7]


def test_none_stop_budgets_by_hand():
    # round 1 shares: p0 1/2 (20, 21), p1 1/2 (one answer, one without) -> both go on, u = 0.5:
    # each asks 2 + round(0.5 * 2) = 3 refine calls of the 4 slots; round 2 all differ (1/3)
    script = {"adaptive_pdr.draft": [(20, 3), (21, 4), (NO_ANSWER, 5), (30, 2)],
              "adaptive_pdr.refine2": [(22, 2), (23, 2), (24, 2), (99, 5), (31, 1), (32, 1), (33, 1), (99, 5)],
              "adaptive_pdr.refine3": [(25, 4), (34, 3)]}
    res, b_seq, b_total = run(script)
    assert b_total == [3 + 4 + 2 * 3 + 4, 5 + 2 + 1 * 3 + 3]
    # accepted path: final refine <- round 2's top-1 (ties: slot 0) <- round 1's top-1
    # (p0: slot 0; p1: slot 1, the only answered draft)
    assert b_seq == [4 + 2 + 3, 3 + 1 + 2]
    assert res.final_tokens[:, 0].tolist() == [25, 34]
    assert [len(calls_of(res, i, "refine")) for i in range(2)] == [4, 4]


def test_a_mix_budgets_by_hand():
    # p0 unanimous -> stops; p1 (1/2) gets 3 refines that agree (share 1) -> stops in round 2
    script = {"adaptive_pdr.draft": [(20, 3), (20, 4), (30, 5), (31, 2)],
              "adaptive_pdr.refine2": [(99, 5)] * 4 + [(32, 2), (32, 3), (32, 1), (99, 5)],
              "adaptive_pdr.refine3": LAST_FILL}
    res, b_seq, b_total = run(script)
    assert b_total == [3 + 4, 5 + 2 + 2 + 3 + 1]
    assert b_seq == [3, 2 + 5]  # p1: round 2's slot 0, whose parent is round 1's top-1 (slot 0)
    assert res.final_tokens[:, 0].tolist() == [20, 32]
    assert calls_of(res, 0, "refine") == []
    assert [b for _, b in calls_of(res, 1, "refine")] == [2, 3, 1]
    assert int(res.workspace_lengths[0]) == 0 and int(res.workspace_lengths[1]) > 0


def test_a_lower_tau_stops_on_a_half_share():
    script = {"adaptive_pdr.draft": [(20, 3), (21, 4), (NO_ANSWER, 5), (NO_ANSWER, 2)],
              "adaptive_pdr.refine2": [(99, 5)] * 4 + [(32, 1)] * 4, "adaptive_pdr.refine3": [(99, 5), (40, 2)]}
    res, b_seq, b_total = run(script, tau=0.5)
    # p0: share 1/2 >= 0.5 stops; p1 has no answer (share 0, u = 1): asks 2 + 2 = 4 refines,
    # all agree and it stops in round 2
    assert b_total == [7, 7 + 4]
    assert b_seq == [3, 1 + 5]


@pytest.mark.parametrize("cap,middle", [(15, [0, 0]), (25, [4, 0])])
def test_the_cap_is_never_passed(cap, middle):
    # every call generates its whole budget; p0 has no answer (u = 1), p1 half (u = 0.5)
    script = {"adaptive_pdr.draft": [(NO_ANSWER, N), (NO_ANSWER, N), (30, N), (31, N)],
              "adaptive_pdr.refine2": [(40 + j, N) for j in range(8)], "adaptive_pdr.refine3": [(50, N), (51, N)]}
    res, _, b_total = run(script, cap=cap)
    assert sum(b_total) <= cap * 2
    # cap 15: 30 - 20 spent = 2 calls left, both reserved for the final refines;
    # cap 25: 6 calls left, 2 reserved, p0 (most uncertain) asks 4 and gets them, p1 asks 3 of 0 left
    assert [len(calls_of(res, i, "refine")) for i in range(2)] == [m + 1 for m in middle]
    assert b_total == [N * (2 + m + 1) for m in middle]


ALLOCATE = jax.jit(allocate, static_argnums=(3, 4))
LO, EXTRA = 2, 3  # fan-out 2..5


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1), st.booleans()), min_size=9, max_size=9), st.integers(0, 50))
def test_allocate_stays_within_calls_left_and_fanout_bounds(rows, left):
    u = jnp.asarray([r[0] for r in rows], jnp.float32)
    live = np.asarray([r[1] for r in rows])
    grant = np.asarray(ALLOCATE(u, jnp.asarray(live), jnp.int32(left), LO, LO + EXTRA))
    assert grant.sum() <= left
    assert all(g == 0 or LO <= g <= LO + EXTRA for g in grant)
    assert not grant[~live].any()
    want = LO + np.round(np.asarray(u) * EXTRA).astype(int)
    if live.sum() * (LO + EXTRA) <= left:  # enough for everyone: each gets what it asks
        assert grant.tolist() == [int(w) if a else 0 for w, a in zip(want, live)]
    # served by descending uncertainty: a problem left without calls saw fewer than LO left
    # after every more uncertain problem had been served
    for i in np.flatnonzero(live & (grant == 0)):
        before = sum(grant[j] for j in np.flatnonzero(live) if (float(u[j]), -j) > (float(u[i]), -i))
        assert left - before < LO


@pytest.mark.slow  # the in-graph tournament compiles a while_loop with host callbacks
def test_v1_mu_signal_judges_only_live_problems_and_counts_its_calls():
    # flat ratings: every mu is 0.5, the gap 0 (u = 1), so no problem stops and each asks
    # max_fanout = 4 refines; a judged round runs m x n calls per problem (budget_multiple 1):
    # 2 over the 2 drafts, 4 over the 4 refines; the final refine is not judged
    script = {"adaptive_pdr.draft": [(20, 3), (20, 4), (30, 5), (30, 2)],
              "adaptive_pdr.refine2": [(41, 1)] * 4 + [(42, 1)] * 4,
              "adaptive_pdr.refine3": [(50, 2), (51, 2)]}
    res, b_seq, b_total = run(script, signal="v1_mu", tau=0.5)
    judge = [calls_of(res, i, "judge") for i in range(2)]
    assert [len(j) for j in judge] == [2 + 4, 2 + 4]
    judged = [sum(b for _, b in j) for j in judge]
    assert all(b > 0 for j in judge for _, b in j)  # a forced rating's suffix is generated output
    assert [len(calls_of(res, i, "refine")) for i in range(2)] == [4 + 1, 4 + 1]
    assert b_total == [7 + 4 * 1 + 2 + judged[0], 7 + 4 * 1 + 2 + judged[1]]


@pytest.mark.parametrize("field,value,needle", [
    ("rounds", 1, "AdaptivePDR.rounds=1"), ("min_fanout", 0, "AdaptivePDR.min_fanout=0"),
    ("max_fanout", 1, "AdaptivePDR.max_fanout=1"), ("tau", 0.0, "AdaptivePDR.tau=0.0; allowed: (0, 1]"),
    ("tau", 1.5, "AdaptivePDR.tau=1.5"), ("signal", "entropy", "AdaptivePDR.signal='entropy'; allowed"),
    ("cap", 10, "AdaptivePDR.cap=10; allowed: 0 (no cap) or an int >= (min_fanout + 1) x max_new_tokens = 15"),
    ("k", 3, "AdaptivePDR.k=3 exceeds min_fanout=2"),
])
def test_bad_settings_name_the_field(field, value, needle):
    with pytest.raises(ValueError) as e:
        spec(**{field: value})
    assert needle in str(e.value)


def test_registered_built_from_a_config_entry_and_labelled():
    built = registry.build_spec(dict(type="adaptive_pdr", rounds=2, min_fanout=4, max_fanout=8, tau=0.25, cap=640,
                                     max_new_tokens=80))
    assert built == AdaptivePDR(rounds=2, min_fanout=4, max_fanout=8, tau=0.25, cap=640, max_new_tokens=80)
    assert registry.get_operator("adaptive_pdr").spec is AdaptivePDR
    assert built.label.startswith("adaptive_pdr(R=2,M=4-8,tau=0.25,cap=640,sig=majority,k=2")
    assert dataclasses.replace(built, tau=0.5).label != built.label
