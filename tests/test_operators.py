"""Operators with a scripted fake model: budgets by hand, oracle admission, assembly,
and PDR(1,...,1) == SR on the tiny real model."""

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from prd_jax.model import get_model_config, init_params
from prd_jax import prompts as P
from prd_jax.operators.assembly import assemble, truncate_head_tail
from prd_jax.operators.lm import ModelLM
from prd_jax.operators.runner import encode_problems, make_context, run_operator
from prd_jax.operators.specs import Sampling
from prd_jax.operators.pdr import PDR
from prd_jax.operators.sr import SR
from prd_jax.operators.long_cot import LongCoT
from prd_jax.sampling import SampleOutput
from fakes import CharTokenizer, FirstTokenGrader


@flax.struct.dataclass
class ScriptedLM:
    """Every call emits exactly max_new tokens; fan-out sample m emits token 100 + m."""

    def generate(self, prompts, lengths, keys, scfg, fanout=True, name="", live=None):
        rows = prompts.shape[0] * scfg.num_samples
        m = jnp.arange(rows) % scfg.num_samples
        tokens = jnp.broadcast_to((100 + m)[:, None], (rows, scfg.max_new_tokens)).astype(jnp.int32)
        zeros = jnp.zeros((rows, scfg.max_new_tokens))
        return SampleOutput(tokens, zeros, jnp.full((rows,), scfg.max_new_tokens, jnp.int32),
                            jnp.zeros((rows,), bool))

    def next_logits(self, prompts, lengths, name="", live=None):
        return jnp.zeros((prompts.shape[0], 256))


TOK = CharTokenizer()
N, CMAX, HEAD, KAPPA = 9, 6, 2, 5
PROBLEM = "2+2=?"


def ctx_for(kappa=KAPPA):
    return make_context(TOK, Sampling(), grader=FirstTokenGrader(), kappa=kappa, k_max=4)


def literal_len(template, kappa=KAPPA):
    text = template.user.replace("{kappa}", str(kappa)).replace("{{}}", "{}")
    for slot in P.SLOTS:
        text = text.replace("{" + slot + "}", "")
    return len("U:" + text + "\nA:" + template.assistant_prefix)


def header_len(j):
    return len(P.CANDIDATE_HEADER.format(index=j))


FOOT = len(P.CANDIDATE_FOOTER)
LP = len(PROBLEM)
SOLVE_IN = literal_len(P.SOLVE) + LP
CAND = min(N, CMAX)


def topk_in(k):
    return literal_len(P.PDR_TOPK) + LP + sum(header_len(j + 1) + CAND + FOOT for j in range(k))


def problems(gold="d"):
    return encode_problems(TOK, [PROBLEM], [gold], max_problem_tokens=64)[0]


def workspace(res):
    row = np.asarray(res.workspace_tokens[0]).tolist()
    return row[len(row) - int(res.workspace_lengths[0]):]


def run(spec, gold="d"):
    res = run_operator(ScriptedLM(), problems(gold), jax.random.key(0), spec, ctx_for())
    return res, int(res.b_seq[0]), int(res.b_total[0])


def io(res):
    """(b_seq_io, b_total_io) of problem 0: the in + out sums (context cost)."""
    return int(res.b_seq_io[0]), int(res.b_total_io[0])


def pdr_spec(distill, selector="random", k=2, schedule=(4, 2, 1)):
    return PDR(schedule, distill, k, selector, KAPPA, N, CMAX, HEAD)


def test_long_cot_budget():
    res, b_seq, b_total = run(LongCoT(N))
    assert b_seq == b_total == N  # generated tokens only (PDR §3.1)
    assert io(res) == (SOLVE_IN + N, SOLVE_IN + N)


@pytest.mark.parametrize("error_analysis", [False, True])
def test_sr_budget(error_analysis):
    tpl = P.SR_ERROR_ANALYSIS if error_analysis else P.SR_REFINE
    res, b_seq, b_total = run(SR(2, error_analysis, N, CMAX, HEAD))
    refine_in = literal_len(tpl) + LP + CAND
    assert b_seq == b_total == 3 * N
    assert io(res) == ((SOLVE_IN + N) + 2 * (refine_in + N),) * 2
    assert int(res.truncations[0]) == 2  # both refine prompts cut the 9-token answer to 6


@pytest.mark.slow
def test_a_final_stop_token_counts_in_its_call_but_is_not_quoted():
    from prd_jax.operators.calls import strip_stop

    tok = jnp.asarray([[5, 6, 1, 0], [5, 1, 7, 0], [1, 0, 0, 0], [0, 0, 0, 0]])
    assert strip_stop(tok, jnp.asarray([3, 3, 1, 0]), (1, 4)).tolist() == [2, 3, 0, 0]
    assert strip_stop(tok, jnp.asarray([3, 3, 1, 0]), ()).tolist() == [3, 3, 1, 0]
    # every scripted call ends in token 100 (sample 0); with 100 a stop id, the SR refine
    # prompt quotes N - 1 tokens of the draft, while the draft's out_tokens stay N
    ctx = make_context(TOK, Sampling(stop_ids=(100,)), grader=FirstTokenGrader(), kappa=KAPPA, k_max=4)
    res = run_operator(ScriptedLM(), problems("d"), jax.random.key(0), SR(1, False, N, N, HEAD), ctx)
    assert int(res.b_seq_io[0]) == (SOLVE_IN + N) + (literal_len(P.SR_REFINE) + LP + N - 1 + N)
    assert int(res.b_seq[0]) == 2 * N  # the stop token counts as generated
    assert int(res.truncations[0]) == 0
    res = run_operator(ScriptedLM(), problems("d"), jax.random.key(0), PDR((2, 1), "shared_topk", 2, "random",
                                                                          KAPPA, N, N, HEAD), ctx)
    # sample 0's stop token is not quoted; sample 1 (token 101) has none
    assert int(res.workspace_lengths[0]) == header_len(1) + header_len(2) + 2 * FOOT + (N - 1) + N


@pytest.mark.parametrize("distill", ["shared_topk", "per_sample_topk", "random_k"])
@pytest.mark.slow
def test_pdr_extractive_budgets(distill):
    res, b_seq, b_total = run(pdr_spec(distill))
    draft, refine = SOLVE_IN + N, topk_in(2) + N
    assert b_total == 4 * N + 2 * N + N and b_seq == 3 * N  # unused drafts only in b_total
    assert io(res) == (draft + refine + refine, 4 * draft + 2 * refine + 1 * refine)
    assert res.calls.names == ("draft",) * 4 + ("refine",) * 2 + ("refine",)
    assert int(res.calls.accepted[0].sum()) == 3


def test_pdr_global_summary_budget():
    res, b_seq, b_total = run(pdr_spec("global_summary"))
    draft = SOLVE_IN + N

    def summary_in(m):
        return literal_len(P.DISTILL_SUMMARY) + LP + sum(header_len(j + 1) + CAND + FOOT for j in range(m))

    refine = literal_len(P.PDR_SUMMARY) + LP + KAPPA + N
    s1, s2 = summary_in(4) + KAPPA, summary_in(2) + KAPPA
    assert io(res) == (draft + s1 + refine + s2 + refine, 4 * draft + s1 + 2 * refine + s2 + refine)
    # the summary counts once, as its call's output, not again as the refine call's input
    assert b_seq == N + KAPPA + N + KAPPA + N
    assert b_total == 4 * N + KAPPA + 2 * N + KAPPA + N
    assert int(res.workspace_lengths[0]) == KAPPA


def test_pdr_self_pointwise_counts_rating_calls():
    res, b_seq, b_total = run(pdr_spec("shared_topk", "self_pointwise"))
    # no judge reasoning: the forced "\n<rating>" plus one rating token ("1": uniform logits
    # make P(1) = (1/9)(1 - 1/256) the largest) are the judge's output tokens
    judge_out = len("\n<rating>") + 1
    judge = literal_len(P.POINTWISE_MATH) + LP + CAND + judge_out
    draft, refine = SOLVE_IN + N, topk_in(2) + N
    assert io(res) == (draft + refine + refine + 2 * judge, 4 * draft + 2 * refine + refine + (4 + 2) * judge)
    assert b_total == 7 * N + (4 + 2) * judge_out
    assert b_seq == 3 * N + 2 * judge_out  # the accepted candidate's rating call, per round
    # the other reading: generation calls alone on the path (draft, refine, refine)
    assert int(res.calls.b_seq_no_judge[0]) == 3 * N


@pytest.mark.parametrize("spec", [LongCoT(N), SR(2, False, N, CMAX, HEAD)], ids=["long_cot", "sr"])
def test_b_seq_readings_agree_without_a_ranker(spec):
    res, b_seq, _ = run(spec)
    assert int(res.calls.b_seq_no_judge[0]) == b_seq == (1 if isinstance(spec, LongCoT) else 3) * N


def test_oracle_correct_admits_exactly_the_correct_candidate():
    # draft m emits token 100+m; gold "d" encodes to 100 + 3 = 103 -> only draft 3 is correct
    assert TOK.encode("d") == [103]
    res, _, _ = run(pdr_spec("shared_topk", "oracle_correct", k=2))
    ws = workspace(res)
    # round-2 outputs are refine samples m=0,1 -> tokens 100, 101: neither correct, so the
    # final workspace is empty and the final call's parent is round 2's latency-bound call
    # (equal lengths: call 0), whose workspace held only draft 3
    assert ws == []
    accepted_drafts = np.asarray(res.calls.accepted[0, :4])
    assert accepted_drafts.tolist() == [False, False, False, True]


def test_oracle_incorrect_admits_only_incorrect_candidates():
    res, _, _ = run(pdr_spec("shared_topk", "oracle_incorrect", k=2, schedule=(4, 1)))
    ws = workspace(res)
    expected = (TOK.encode(P.CANDIDATE_HEADER.format(index=1)) + [100] * CAND + TOK.encode(P.CANDIDATE_FOOTER)
                + TOK.encode(P.CANDIDATE_HEADER.format(index=2)) + [101] * CAND + TOK.encode(P.CANDIDATE_FOOTER))
    assert ws == expected
    res, _, _ = run(pdr_spec("shared_topk", "oracle_correct", k=2, schedule=(4, 1)))
    ws = workspace(res)
    assert ws == TOK.encode(P.CANDIDATE_HEADER.format(index=1)) + [103] * CAND + TOK.encode(P.CANDIDATE_FOOTER)


def test_truncate_head_tail_hand_computed():
    toks = jnp.array([[1, 2, 3, 4, 5, 6, 7, 8], [9, 8, 0, 0, 0, 0, 0, 0]])
    out, length, cut = truncate_head_tail(toks, jnp.array([8, 2]), 5, 2)
    assert out[0].tolist() == [1, 2, 6, 7, 8] and out[1, :2].tolist() == [9, 8]
    assert length.tolist() == [5, 2] and cut.tolist() == [True, False]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.integers(0, 6), min_size=2, max_size=2), min_size=1, max_size=4),
       st.integers(1, 16))
@pytest.mark.slow
def test_assemble_matches_python_concat_and_respects_capacity(lengths, capacity):
    segs, expected = [], [[], []]
    for s, (l0, l1) in enumerate(lengths):
        tok = jnp.arange(6)[None, :] + 10 * (s + 1) + jnp.array([[0], [100]])
        segs.append((tok, jnp.array([l0, l1])))
        expected[0] += list(range(10 * (s + 1), 10 * (s + 1) + l0))
        expected[1] += list(range(10 * (s + 1) + 100, 10 * (s + 1) + 100 + l1))
    out, kept, overflow = assemble(segs, capacity, pad_id=-1)
    for row in range(2):
        n = int(kept[row])
        assert n <= capacity and n == min(len(expected[row]), capacity)
        assert bool(overflow[row]) == (len(expected[row]) > capacity)
        assert out[row, capacity - n:].tolist() == expected[row][:n]
        assert (np.asarray(out[row, :capacity - n]) == -1).all()


@pytest.mark.parametrize("kwargs,field", [
    (dict(schedule=(4, 2)), "schedule"), (dict(schedule=(2, 1), k=3), "PDR.k=3"),
    (dict(distill="best"), "distill"), (dict(selector="vibes"), "selector"),
    (dict(kappa=0), "kappa"), (dict(truncation_head=999), "truncation_head")])
def test_invalid_pdr_config_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        PDR(**kwargs)


def test_overlong_problem_is_skipped_with_reason():
    probs, kept, skipped = encode_problems(TOK, ["short", "x" * 100], ["1", "2"], max_problem_tokens=20)
    assert kept == [0] and "100 tokens > max_problem_tokens=20" in skipped[1]
    assert probs.tokens.shape[0] == 1


@pytest.mark.slow
def test_pdr_all_ones_schedule_equals_sr_on_tiny_model():
    cfg = get_model_config("tiny", max_position=2048)
    lm = ModelLM(init_params(cfg, jax.random.key(0)), cfg, 0)
    ctx = make_context(TOK, Sampling(temperature=1.0), kappa=8, k_max=2)
    probs = encode_problems(TOK, ["1+1=?", "3*4=?"], ["2", "12"], 32)[0]
    key = jax.random.key(42)
    sr_res = run_operator(lm, probs, key, SR(2, False, 12, 8, 3), ctx)
    pdr_res = run_operator(lm, probs, key, PDR((1, 1, 1), "shared_topk", 1, "random", 8, 12, 8, 3,
                                               refine_template="previous"), ctx)
    np.testing.assert_array_equal(sr_res.final_tokens, pdr_res.final_tokens)
    np.testing.assert_array_equal(sr_res.b_seq, pdr_res.b_seq)
    np.testing.assert_array_equal(pdr_res.b_seq, pdr_res.b_total)


@pytest.mark.slow
def test_problem_result_does_not_depend_on_its_batch():
    cfg = get_model_config("tiny", max_position=2048)
    lm = ModelLM(init_params(cfg, jax.random.key(0)), cfg, 0)
    ctx = make_context(TOK, Sampling(temperature=1.0), kappa=8, k_max=2)
    spec = PDR((3, 2, 1), "per_sample_topk", 2, "random", 8, 10, 8, 3)
    both = encode_problems(TOK, ["1+1=?", "3*4=?"], ["2", "12"], 32, width=16)[0]
    alone = encode_problems(TOK, ["3*4=?"], ["12"], 32, width=16)[0]
    keys = jax.random.split(jax.random.key(9), 2)
    a = run_operator(lm, both, keys, spec, ctx)
    b = run_operator(lm, alone, keys[1:], spec, ctx)
    np.testing.assert_array_equal(a.final_tokens[1], b.final_tokens[0])
    assert int(a.b_total[1]) == int(b.b_total[0]) and int(a.b_seq[1]) == int(b.b_seq[0])
