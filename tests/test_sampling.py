"""Sampler correctness on the tiny random model: ragged batches, fan-out, masks, greedy,
logprobs, stop ids and bounded compilation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prd_jax.model import forward, get_model_config, init_params
from prd_jax.sampling import (Sampler, SamplingConfig, blocked_argmax, blocked_categorical, bucket, choose_tokens,
                              chosen_logprob, length_bucket, top_k_mask, top_p_mask)

PROMPTS = [[5, 17, 33, 2, 9, 100, 41], [7, 8], [250, 3, 3, 3, 64]]


@pytest.fixture(scope="module")
def tiny():
    cfg = get_model_config("tiny")
    return cfg, init_params(cfg, jax.random.key(0))


@pytest.fixture(scope="module")
def sampler(tiny):
    return Sampler(tiny[0])


def greedy_reference(cfg, params, prompt, n, width=32):
    """Greedy decoding by re-running the full uncached forward each step.

    The sequence is right-padded to a fixed width (causal: padding after position i
    cannot change logits at i), so one compiled program serves every step.
    """
    fwd = jax.jit(lambda p, t: forward(cfg, p, t, jnp.arange(width)[None])[0])
    seq = list(prompt)
    for _ in range(n):
        padded = jnp.array([seq + [0] * (width - len(seq))])
        seq.append(int(jnp.argmax(fwd(params, padded)[0, len(seq) - 1])))
    return seq[len(prompt):]


@pytest.mark.slow
def test_greedy_equals_uncached_argmax(tiny, sampler):
    cfg, params = tiny
    out = sampler(params, PROMPTS, jax.random.key(0), SamplingConfig(12, temperature=0.0))
    for row, prompt in enumerate(PROMPTS):
        assert out.tokens[row].tolist() == greedy_reference(cfg, params, prompt, 12)
    assert out.lengths.tolist() == [12, 12, 12]
    assert not out.stopped.any()


@pytest.mark.parametrize("temperature,top_k,top_p", [(0.0, 0, 1.0), (1.0, 0, 1.0), (0.8, 20, 0.9)])
@pytest.mark.slow
def test_ragged_batch_equals_each_prompt_alone(tiny, sampler, temperature, top_k, top_p):
    _, params = tiny
    scfg = SamplingConfig(10, temperature=temperature, top_k=top_k, top_p=top_p)
    keys = jax.random.split(jax.random.key(3), len(PROMPTS))
    batch = sampler(params, PROMPTS, keys, scfg)
    for row, prompt in enumerate(PROMPTS):
        alone = sampler(params, [prompt], keys[row:row + 1], scfg)
        np.testing.assert_array_equal(batch.tokens[row, :alone.tokens.shape[1]], alone.tokens[0])
        np.testing.assert_allclose(batch.logprobs[row, :alone.tokens.shape[1]], alone.logprobs[0],
                                   atol=1e-5)


@pytest.mark.slow
def test_fanout_equals_repeated_prefill(tiny, sampler):
    _, params = tiny
    scfg = SamplingConfig(10, temperature=1.0, num_samples=4)
    a = sampler(params, PROMPTS, jax.random.key(7), scfg, fanout=True)
    b = sampler(params, PROMPTS, jax.random.key(7), scfg, fanout=False)
    assert a.tokens.shape[0] == len(PROMPTS) * 4
    np.testing.assert_array_equal(a.tokens, b.tokens)
    np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)
    # samples of one prompt differ from each other (independent keys)
    assert len({tuple(r) for r in np.asarray(a.tokens[:4])}) > 1


@pytest.mark.slow
def test_logprobs_equal_model_log_softmax(tiny, sampler):
    cfg, params = tiny
    prompt = PROMPTS[0]
    out = sampler(params, [prompt], jax.random.key(11), SamplingConfig(8, temperature=1.0))
    gen = out.tokens[0].tolist()
    seq = prompt + gen
    logits, _ = forward(cfg, params, jnp.array([seq]), jnp.arange(len(seq))[None])
    logp = jax.nn.log_softmax(logits[0], axis=-1)
    expected = [float(logp[len(prompt) - 1 + i, t]) for i, t in enumerate(gen)]
    np.testing.assert_allclose(out.logprobs[0], expected, atol=1e-5)


def test_stop_ids_end_rows(tiny, sampler):
    cfg, params = tiny
    free = sampler(params, PROMPTS, jax.random.key(0), SamplingConfig(12, temperature=0.0))
    stop = int(free.tokens[0, 3])  # row 0 emits this at step 3 (maybe earlier too)
    first = free.tokens[0].tolist().index(stop)
    out = sampler(params, PROMPTS, jax.random.key(0),
                  SamplingConfig(12, temperature=0.0, stop_ids=(stop,)))
    assert int(out.lengths[0]) == first + 1 and bool(out.stopped[0])
    assert out.tokens[0, :first + 1].tolist() == free.tokens[0, :first + 1].tolist()
    assert (np.asarray(out.tokens[0, first + 1:]) == 0).all()
    assert (np.asarray(out.logprobs[0, first + 1:]) == 0).all()
    for row in range(1, len(PROMPTS)):  # other rows stop only where they emit `stop`
        toks = free.tokens[row].tolist()
        expect = toks.index(stop) + 1 if stop in toks else 12
        assert int(out.lengths[row]) == expect


def test_temperature_zero_is_argmax():
    logits = jnp.array([[0.1, 2.0, -1.0, 1.9], [3.0, 0.0, 0.0, 2.5]])
    keys = jax.random.split(jax.random.key(0), 2)
    assert choose_tokens(logits, keys, SamplingConfig(1, temperature=0.0)).tolist() == [1, 0]


@pytest.mark.slow
def test_blocked_categorical_follows_the_softmax():
    """Two-stage Gumbel-max draws: empirical frequencies within 5 sigma of softmax(logits) for
    every token, over a vocabulary that is not a multiple of the block (padded tail) and with
    a fully masked block and masked tokens never drawn."""
    vocab, n = 300, 40000
    logits = np.asarray(jax.random.normal(jax.random.key(3), (vocab,))) * 1.5
    logits[128:256] = -np.inf  # a whole block filtered out
    logits[[5, 260]] = -np.inf
    probs = np.exp(logits - logits[np.isfinite(logits)].max())
    probs /= probs.sum()
    keys = jax.random.split(jax.random.key(11), n)
    toks = np.asarray(blocked_categorical(keys, jnp.tile(jnp.asarray(logits, jnp.float32)[None], (n, 1))))
    freq = np.bincount(toks, minlength=vocab) / n
    assert freq[~np.isfinite(logits)].sum() == 0
    sigma = np.sqrt(probs * (1 - probs) / n)
    assert (np.abs(freq - probs) <= 5 * sigma + 1e-12).all(), np.abs(freq - probs).max()
    # a row's draw depends on its own key only: the same key in a different batch, same token
    again = blocked_categorical(keys[7:9], jnp.tile(jnp.asarray(logits, jnp.float32)[None], (2, 1)))
    assert np.asarray(again).tolist() == toks[7:9].tolist()


@pytest.mark.slow
def test_blocked_argmax_and_logprob_equal_the_dense_ones():
    """The blocked reductions equal `jnp.argmax` (first maximum, ties across blocks) and the
    log-softmax, on a vocabulary that is not a multiple of the block."""
    logits = jnp.round(jax.random.normal(jax.random.key(4), (64, 1000)) * 2, 1)  # many ties
    logits = logits.at[0, 900].set(50.0).at[0, 3].set(50.0)  # tie across blocks: the first wins
    assert np.asarray(blocked_argmax(logits)).tolist() == np.asarray(jnp.argmax(logits, -1)).tolist()
    assert int(blocked_argmax(logits)[0]) == 3
    tok = jax.random.randint(jax.random.key(5), (64,), 0, 1000)
    dense = jnp.take_along_axis(jax.nn.log_softmax(logits, -1), tok[:, None], -1)[:, 0]
    np.testing.assert_allclose(np.asarray(chosen_logprob(logits, tok)), np.asarray(dense), atol=2e-6)


def test_top_k_mask_hand_computed():
    logits = jnp.array([[1.0, 5.0, 3.0, 4.0, 2.0]])
    kept = np.isfinite(np.asarray(top_k_mask(logits, 2)))
    assert kept.tolist() == [[False, True, False, True, False]]


def test_top_p_mask_hand_computed():
    probs = jnp.array([[0.5, 0.05, 0.3, 0.15]])
    logits = jnp.log(probs)
    # sorted: 0.5, 0.3, 0.15, 0.05; mass before each: 0, .5, .8, .95
    assert np.isfinite(np.asarray(top_p_mask(logits, 0.5))).tolist() == [[True, False, False, False]]
    assert np.isfinite(np.asarray(top_p_mask(logits, 0.75))).tolist() == [[True, False, True, False]]
    assert np.isfinite(np.asarray(top_p_mask(logits, 0.85))).tolist() == [[True, False, True, True]]
    assert np.isfinite(np.asarray(top_p_mask(logits, 1.0))).all()


def test_top_k_sampling_never_leaves_the_top_k():
    logits = jnp.tile(jnp.arange(10.0)[None] * 0.3, (2000, 1))
    keys = jax.random.split(jax.random.key(1), 2000)
    toks = np.asarray(choose_tokens(logits, keys, SamplingConfig(1, temperature=1.0, top_k=3)))
    assert set(toks.tolist()) == {7, 8, 9}


@pytest.mark.slow
def test_bucketed_shapes_compile_once(tiny):
    cfg, params = tiny
    sampler = Sampler(cfg)
    scfg = SamplingConfig(10, temperature=0.0)
    sampler(params, [[1, 2, 3]], jax.random.key(0), scfg)
    sampler(params, [[4, 5, 6, 7, 8, 9]], jax.random.key(0), scfg)  # same prompt bucket (16)
    sampler(params, [[1] * 20], jax.random.key(0), scfg)  # prompt bucket 32
    assert sampler.num_compilations == 2
    assert [bucket(n) for n in (1, 16, 17, 100)] == [16, 16, 32, 128]
    # prompt/generation lengths step by powers of two and their halfway points (3 * 2^(j-1))
    assert [length_bucket(n) for n in (1, 16, 17, 25, 33, 44, 49, 65, 100, 129)] == \
        [16, 16, 24, 32, 48, 48, 64, 96, 128, 192]
    assert [length_bucket(n, 8) for n in (5, 9, 13)] == [8, 12, 16]


@pytest.mark.parametrize("kwargs,field", [
    (dict(max_new_tokens=0), "max_new_tokens"), (dict(max_new_tokens=4, top_p=0.0), "top_p"),
    (dict(max_new_tokens=4, temperature=-1.0), "temperature"),
    (dict(max_new_tokens=4, num_samples=0), "num_samples")])
def test_bad_sampling_config(kwargs, field):
    with pytest.raises(ValueError, match=field):
        SamplingConfig(**kwargs)


def test_prompt_longer_than_context(tiny, sampler):
    _, params = tiny
    with pytest.raises(ValueError, match="exceeds the model context of 512"):
        sampler(params, [[1] * 600], jax.random.key(0), SamplingConfig(8))
    with pytest.raises(ValueError, match="max_new_tokens=100"):
        sampler(params, [[1] * 450], jax.random.key(0), SamplingConfig(100))


def test_row_chunks_hand_computed():
    from prd_jax.sampling import row_chunks

    assert row_chunks(8, 4, 0) == 1            # no limit
    assert row_chunks(8, 4, 32) == 1           # 32 rows fit
    assert row_chunks(8, 4, 16) == 2           # 4 prompts x 4 samples per chunk
    assert row_chunks(6, 1, 4) == 2            # 3 prompts per chunk (6 / 2)
    assert row_chunks(8, 1, 6, multiple=4) == 2  # 4 prompts per chunk keep the 4 batch shards even
    assert row_chunks(12, 1, 5, multiple=2) == 3  # 4 prompts per chunk: fits 5 rows, even
    assert row_chunks(12, 1, 3, multiple=2) == 6  # 3 per chunk is odd; 2 per chunk keeps shards even
    with pytest.raises(ValueError, match="num_samples"):
        SamplingConfig(8, num_samples=4, max_rows=2)


@pytest.mark.parametrize("num_samples,max_rows", [(1, 2), (3, 3), (2, 4)])
@pytest.mark.slow
def test_row_chunked_sampling_equals_one_call(tiny, sampler, num_samples, max_rows):
    """Each row's key is its own: sequential row chunks give the unchunked tokens exactly."""
    _, params = tiny
    prompts = PROMPTS + [[9, 9, 1], [44]]
    keys = jax.random.split(jax.random.key(11), len(prompts))
    whole = sampler(params, prompts, keys, SamplingConfig(9, temperature=1.0, top_p=0.9, num_samples=num_samples))
    chunked = sampler(params, prompts, keys, SamplingConfig(9, temperature=1.0, top_p=0.9,
                                                            num_samples=num_samples, max_rows=max_rows))
    np.testing.assert_array_equal(chunked.tokens, whole.tokens)
    np.testing.assert_array_equal(chunked.lengths, whole.lengths)
    np.testing.assert_allclose(chunked.logprobs, whole.logprobs, atol=1e-5)


@pytest.mark.slow
def test_row_chunked_next_logits_equal_the_uncached_forward(tiny):
    """The judge's rating read in row chunks: each row's logits equal its own uncached forward."""
    from prd_jax.sampling import next_logits

    cfg, params = tiny
    prompts = PROMPTS + [[9, 9, 1], [44], [3, 1, 4, 1, 5, 9]]
    width = max(map(len, prompts))
    left = jnp.asarray([[0] * (width - len(p)) + p for p in prompts])
    lengths = jnp.asarray([len(p) for p in prompts])
    chunked = jax.jit(lambda t, n: next_logits(cfg, params, t, n, max_rows=2))(left, lengths)
    for i, p in enumerate(prompts):
        ref = forward(cfg, params, jnp.asarray([p]), jnp.arange(len(p))[None])[0][0, -1]
        np.testing.assert_allclose(chunked[i], ref, atol=2e-5, rtol=1e-5)


@pytest.mark.slow
def test_blocked_prefill_attention_equals_dense(tiny):
    """Query blocks of prefill attention give the dense masked attention over the prompt."""
    from prd_jax.model.attention import prefill_attention

    b, t, n, k, dh = 2, 16, 4, 2, 8
    q, key, val = (jax.random.normal(jax.random.key(i), (b, t, h, dh)) for i, h in enumerate((n, k, k)))
    start = jnp.array([0, 5])
    j = jnp.arange(t)
    mask = (j[None, None, :] <= j[None, :, None]) & (j[None, None, :] >= start[:, None, None])
    dense = jax.nn.dot_product_attention(q, key, val, mask=mask[:, None], scale=0.3)
    for block in (4, 5):  # 16 = 4 x 4; 16 = 3 x 5 + 1 (last block padded)
        blocked = prefill_attention(q, key, val, start, 0.3, block=block)
        assert blocked.shape == dense.shape
        np.testing.assert_allclose(blocked[0], dense[0], atol=1e-5)
        np.testing.assert_allclose(blocked[1, 5:], dense[1, 5:], atol=1e-5)  # padding queries are unused


@pytest.mark.slow
def test_causal_block_attention_equals_dense_with_packed_rows():
    """Training attention in query blocks (keys after the block skipped) equals one dense call
    under the causal, segment-block-diagonal mask, values and gradients: the written-out
    backward (`fused`, also under every remat policy, which keeps or recomputes its saved
    output and log-sum-exp) and the differentiated blocks; a length that is not a multiple
    of the block gives a short last block."""
    from prd_jax.model.attention import causal_block_attention
    from prd_jax.model.decoder import REMAT_POLICY

    b, n, k, dh = 2, 4, 2, 8
    for t, block in ((16, 4), (16, 8), (12, 5)):
        q, key, val = (jax.random.normal(jax.random.key(i), (b, t, h, dh)) for i, h in enumerate((n, k, k)))
        seg = jnp.asarray([[0] * 5 + [1] * (t - 5), [0] * (t - 3) + [1] * 3])  # two packed examples per row
        j = jnp.arange(t)
        mask = ((j[None, None, :] <= j[None, :, None]) & (seg[:, :, None] == seg[:, None, :]))[:, None]

        def dense(q, key, val):
            return jax.nn.dot_product_attention(q, key, val, mask=mask, scale=0.3)

        loss = lambda f: lambda *a: jnp.sum(jnp.sin(f(*a)))  # noqa: E731
        want = jax.grad(loss(dense), argnums=(0, 1, 2))(q, key, val)
        for fused, policy in ((False, None), (True, None), (True, "dots"), (True, "dots_no_batch"), (False, "full")):
            def blocked(q, key, val):
                return causal_block_attention(q, key, val, mask, 0.3, block=block, fused=fused)

            if policy is not None:
                blocked = jax.checkpoint(blocked, policy=REMAT_POLICY[policy])
            np.testing.assert_allclose(blocked(q, key, val), dense(q, key, val), atol=1e-6)
            for g_b, g_d in zip(jax.grad(loss(blocked), argnums=(0, 1, 2))(q, key, val), want):
                np.testing.assert_allclose(g_b, g_d, atol=1e-5)
