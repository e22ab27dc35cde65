"""Thinking budgets that end in an answer (issue 36 §2): past `think_budget` tokens a row
whose thinking block is still open gets the end-of-thinking marker forced in, in-graph,
then answers; the quoted candidate is the answer after the marker; budgets count both."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prd_jax import sampling
from prd_jax.model import get_model_config, init_params
from prd_jax.operators.calls import strip_thinking
from prd_jax.operators.lm import ModelLM
from prd_jax.operators.runner import encode_problems, make_context, run_operator
from prd_jax.operators.specs import Judge, Sampling
from prd_jax.operators.long_cot import LongCoT
from test_thinking import byte_tokenizer

TOK = byte_tokenizer()
THINK_END = TOK.token_to_id("</think>")
CFG = get_model_config("tiny").replace(vocab_size=264)
PARAMS = init_params(CFG, jax.random.key(7))
PROMPTS = jnp.asarray([[0, 0, 5, 9, 33], [0, 40, 41, 42, 43], [70, 71, 72, 73, 74]], jnp.int32)
LENGTHS = jnp.asarray([3, 4, 5], jnp.int32)


def _generate(scfg, layers="unrolled"):
    import dataclasses
    scfg = dataclasses.replace(scfg, decode_layers=layers)
    out = sampling.generate(CFG, PARAMS, PROMPTS, LENGTHS, jax.random.split(jax.random.key(0), 3),
                            jnp.int32(scfg.max_new_tokens), scfg, gen_len=scfg.max_new_tokens)
    return jax.tree.map(np.asarray, out)


def _unused_ids(tokens, n):
    """`n` ids the free run never writes: forcing them cannot coincide with a sample."""
    seen = set(np.asarray(tokens).ravel().tolist())
    return tuple(i for i in range(10, 250) if i not in seen)[:n]


@pytest.mark.parametrize("layers", ["unrolled", "scan"])
@pytest.mark.parametrize("marker_len", [1, 3])
@pytest.mark.slow
def test_the_marker_is_forced_at_exactly_the_budget_then_the_row_answers(layers, marker_len):
    free = _generate(sampling.SamplingConfig(12, temperature=0.0), layers)
    marker = _unused_ids(free.tokens, marker_len)
    budget = 4
    forced = _generate(sampling.SamplingConfig(12, temperature=0.0, think_budget=budget, think_end=marker), layers)
    for r in range(3):
        np.testing.assert_array_equal(forced.tokens[r, :budget], free.tokens[r, :budget])  # thinking as before
        assert tuple(forced.tokens[r, budget:budget + marker_len]) == marker  # closed at exactly the budget
        assert np.all(forced.logprobs[r, budget:budget + marker_len] == 0.0)  # forced, not sampled
        assert forced.lengths[r] == 12  # thinking + marker + answer, all counted
        answer = forced.tokens[r, budget + marker_len:]
        assert not np.array_equal(answer, np.asarray(marker * 12)[:len(answer)])  # the model goes on answering


@pytest.mark.slow
def test_a_row_that_closes_its_own_block_is_not_forced():
    free = _generate(sampling.SamplingConfig(12, temperature=0.0))
    marker = (int(free.tokens[0, 1]),)  # row 0 writes it at step 1, on its own
    forced = _generate(sampling.SamplingConfig(12, temperature=0.0, think_budget=4, think_end=marker))
    np.testing.assert_array_equal(forced.tokens[0], free.tokens[0])
    for r in (1, 2):  # the others are forced unless they, too, wrote the marker before step 4
        if marker[0] not in free.tokens[r, :4]:
            assert forced.tokens[r, 4] == marker[0]


@pytest.mark.slow
def test_forced_rows_with_compaction_equal_the_static_loop():
    base = dict(temperature=0.0, think_budget=3, think_end=(THINK_END,), stop_ids=(7,))
    a = _generate(sampling.SamplingConfig(10, **base))
    b = _generate(sampling.SamplingConfig(10, compact_min_rows=1, **base))
    np.testing.assert_array_equal(a.tokens, b.tokens)
    np.testing.assert_array_equal(a.lengths, b.lengths)


def test_bad_think_budgets_are_refused_by_name():
    with pytest.raises(ValueError, match="think_budget=3 needs think_end"):
        sampling.SamplingConfig(8, think_budget=3)
    with pytest.raises(ValueError, match="leaves no answer tokens"):
        sampling.SamplingConfig(8, think_budget=7, think_end=(5,))
    with pytest.raises(ValueError, match=r"LongCoT: CallBudget.think_budget=64; allowed: 0 .* or 1..63"):
        LongCoT(max_new_tokens=64, think_budget=64)
    with pytest.raises(ValueError, match="Judge.think_budget"):
        Judge(max_new_tokens=8, think_budget=9)


@pytest.mark.slow
def test_long_cot_quotes_the_answer_and_counts_both_parts():
    ctx = make_context(TOK, Sampling(temperature=0.0, stop_ids=()), k_max=2)
    assert ctx.think_end == (THINK_END,)
    problems, _, _ = encode_problems(TOK, ["2+2?", "3+5?"], ["4", "8"], 16)
    lm = ModelLM(PARAMS, CFG, TOK.pad_id)
    res = jax.tree.map(np.asarray, run_operator(lm, problems, jax.random.key(0),
                                                LongCoT(max_new_tokens=10, think_budget=5), ctx))
    for r in range(2):
        tok, n = res.final_tokens[r], int(res.final_lengths[r])
        hit = np.flatnonzero(tok[:n] == THINK_END)
        assert hit.size and hit[0] <= 5  # closed by the model or forced at exactly step 5
        assert res.b_seq[r] == res.b_total[r] == n == 10  # thinking, marker and answer all count
        quoted, q_len = strip_thinking(jnp.asarray(tok[None]), jnp.asarray([n]), ctx.think_end, ())
        last = hit[-1]
        np.testing.assert_array_equal(np.asarray(quoted[0, :int(q_len[0])]), tok[last + 1:n])  # the answer
