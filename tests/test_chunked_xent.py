"""Chunked cross-entropy equals the full-logits token logprobs: values and gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prd_jax.model import forward, get_model_config, init_params
from prd_jax.train.chunked_xent import chunked_token_logprobs
from prd_jax.train.losses import token_entropy, token_logprobs


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.slow
def test_chunked_logprobs_and_grads_equal_full_logits(tied):
    cfg = get_model_config("tiny").replace(tie_embeddings=tied)
    params = init_params(cfg, jax.random.key(0))
    tokens = jax.random.randint(jax.random.key(1), (2, 11), 0, cfg.vocab_size)
    targets = jnp.roll(tokens, -1, axis=1)
    positions = jnp.broadcast_to(jnp.arange(11), tokens.shape)

    def full(p):
        logits, _ = forward(cfg, p, tokens, positions)
        return token_logprobs(logits, targets), (jnp.argmax(logits, -1) == targets).astype(jnp.float32)

    def chunked(p):
        hidden, _ = forward(cfg, p, tokens, positions, return_hidden=True)
        return chunked_token_logprobs(cfg, p, hidden, targets, chunk=4)  # 11 positions: last chunk padded

    (lp_full, hit_full), (lp_chunk, hit_chunk) = full(params), chunked(params)
    np.testing.assert_allclose(lp_chunk, lp_full, atol=1e-5)
    np.testing.assert_array_equal(hit_chunk, hit_full)
    hidden, _ = forward(cfg, params, tokens, positions, return_hidden=True)
    *_, entropy = chunked_token_logprobs(cfg, params, hidden, targets, chunk=4, with_entropy=True)
    np.testing.assert_allclose(entropy, token_entropy(forward(cfg, params, tokens, positions)[0]), atol=1e-5)
    g_full = jax.grad(lambda p: full(p)[0].sum())(params)
    g_chunk = jax.grad(lambda p: chunked(p)[0].sum())(params)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-4), g_chunk, g_full)


@pytest.mark.slow
def test_sft_loss_equals_full_logits_reference():
    """The SFT loss (chunked head) gives the NLL sum, token count and token accuracy of a
    numpy log-softmax over the full logits, on weighted, padded rows."""
    from prd_jax.train.sft import sft_loss_fn

    cfg = get_model_config("tiny")
    params = init_params(cfg, jax.random.key(2))
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, cfg.vocab_size, (3, 300)).astype(np.int32)  # 300: three chunks, the last padded
    weights = (rng.random((3, 300)) < 0.6).astype(np.float32)
    batch = dict(inputs=tokens, targets=np.roll(tokens, -1, axis=1), weights=weights,
                 positions=np.broadcast_to(np.arange(300, dtype=np.int32), (3, 300)),
                 segment_ids=np.ones((3, 300), np.int32))
    total, count, metrics = sft_loss_fn(cfg)(params, batch)
    logits = np.asarray(forward(cfg, params, tokens, batch["positions"], segment_ids=batch["segment_ids"])[0],
                        np.float64)
    logp = logits - logits.max(-1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
    nll = -np.take_along_axis(logp, batch["targets"][..., None], -1)[..., 0]
    np.testing.assert_allclose(float(total), (nll * weights).sum(), rtol=1e-5)
    assert float(count) == weights.sum()
    hits = (logits.argmax(-1) == batch["targets"]) * weights
    np.testing.assert_allclose([float(x) for x in metrics["token_accuracy"]], [hits.sum(), weights.sum()])


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.slow
def test_fused_weighted_nll_values_and_grads_equal_full_logits(tied):
    """`chunked_weighted_nll` (the head's gradient formed in the forward pass) against the
    full-logits log-softmax: the weighted NLL sum and hit count, and the gradients of params,
    hidden states and weights (weights' is -log p). Vocabulary 200: the last 128-token block
    of the blocked logsumexp and argmax is padded."""
    from prd_jax.train.chunked_xent import chunked_weighted_nll

    cfg = get_model_config("tiny").replace(tie_embeddings=tied, vocab_size=200)
    params = init_params(cfg, jax.random.key(3))
    rng = np.random.default_rng(1)
    tokens = jnp.asarray(rng.integers(0, cfg.vocab_size, (2, 11)), jnp.int32)
    targets = jnp.roll(tokens, -1, axis=1)
    weights = jnp.asarray(rng.random((2, 11)) * (rng.random((2, 11)) < 0.7), jnp.float32)
    positions = jnp.broadcast_to(jnp.arange(11), tokens.shape)

    def full(p, w):
        logits, _ = forward(cfg, p, tokens, positions)
        hits = (jnp.argmax(logits, -1) == targets).astype(jnp.float32)
        return -jnp.sum(w * token_logprobs(logits, targets)), jnp.sum(w * hits)

    def fused(p, w):
        hidden, _ = forward(cfg, p, tokens, positions, return_hidden=True)
        return chunked_weighted_nll(cfg, p, hidden, targets, w, chunk=4)  # 11 positions: last chunk padded

    (nll_ref, hits_ref), (nll, hits) = full(params, weights), fused(params, weights)
    np.testing.assert_allclose(float(nll), float(nll_ref), rtol=1e-5)
    assert float(hits) == pytest.approx(float(hits_ref), abs=1e-6)
    g_ref = jax.grad(lambda p, w: full(p, w)[0], argnums=(0, 1))(params, weights)
    g = jax.jit(jax.grad(lambda p, w: 3.0 * fused(p, w)[0], argnums=(0, 1)))(params, weights)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, 3.0 * b, atol=1e-5, rtol=1e-4), g, g_ref)
    assert float(jnp.abs(g[1]).sum()) > 0  # the weights' gradient is -log p, not dropped


@pytest.mark.slow
def test_fused_weighted_nll_under_a_mesh_equals_one_device():
    """On a (data=2, tensor=4) mesh the fused head gives one device's loss and gradients."""
    from prd_jax.mesh import make_mesh
    from prd_jax.train.chunked_xent import chunked_weighted_nll

    cfg = get_model_config("tiny").replace(tie_embeddings=False)
    params = init_params(cfg, jax.random.key(4))
    rng = np.random.default_rng(2)
    tokens = jnp.asarray(rng.integers(0, cfg.vocab_size, (4, 16)), jnp.int32)
    weights = jnp.asarray(rng.random((4, 16)) < 0.8, jnp.float32)
    positions = jnp.broadcast_to(jnp.arange(16), tokens.shape)

    def loss(p, mesh):
        hidden, _ = forward(cfg, p, tokens, positions, return_hidden=True, mesh=mesh)
        return chunked_weighted_nll(cfg, p, hidden, jnp.roll(tokens, -1, 1), weights, chunk=8, mesh=mesh)[0]

    mesh = make_mesh("data=2,tensor=4", jax.devices())
    one = jax.jit(jax.value_and_grad(lambda p: loss(p, None)))(params)
    many = jax.jit(jax.value_and_grad(lambda p: loss(p, mesh)))(params)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-4), many, one)
