"""Chunked cross-entropy equals the full-logits token logprobs: values and gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prd_jax.model import forward, get_model_config, init_params
from prd_jax.train.chunked_xent import chunked_token_logprobs
from prd_jax.train.losses import token_logprobs


@pytest.mark.parametrize("tied", [True, False])
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
        return chunked_token_logprobs(cfg, p, hidden, targets, chunk=5)  # 22 tokens: last chunk padded

    (lp_full, hit_full), (lp_chunk, hit_chunk) = full(params), chunked(params)
    np.testing.assert_allclose(lp_chunk, lp_full, atol=1e-5)
    np.testing.assert_array_equal(hit_chunk, hit_full)
    g_full = jax.grad(lambda p: full(p)[0].sum())(params)
    g_chunk = jax.grad(lambda p: chunked(p)[0].sum())(params)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-4), g_chunk, g_full)
