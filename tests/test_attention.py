"""Training attention in scanned query-block groups (`prd_jax.model.attention`) against a
plain softmax reference written out here, values and gradients; the groups' layout; and a
program whose size does not grow with the sequence length."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prd_jax.model.attention import block_groups, causal_block_attention


def _reference(q, key, val, mask, scale):
    """softmax(q k^T * scale, masked) v per head, kv heads repeated for their G query heads."""
    g = q.shape[2] // key.shape[2]
    key, val = jnp.repeat(key, g, axis=2), jnp.repeat(val, g, axis=2)
    s = jnp.einsum("btnd,bsnd->bnts", q, key) * scale
    s = jnp.where(mask, s, -jnp.inf)
    return jnp.einsum("bnts,bsnd->btnd", jax.nn.softmax(s, axis=-1), val)


def _masks(t):
    """Causal; causal within two packed segments per row (different split per row); causal
    with a 3-token sliding window."""
    j = jnp.arange(t)
    causal = j[None, :] <= j[:, None]
    seg = jnp.asarray([[0] * 5 + [1] * (t - 5), [0] * (t - 9) + [1] * 9])
    packed = causal[None] & (seg[:, :, None] == seg[:, None, :])
    window = causal & (j[:, None] - j[None, :] < 3)
    return {"causal": jnp.broadcast_to(causal, (2, t, t))[:, None], "packed": packed[:, None],
            "window": jnp.broadcast_to(window, (2, t, t))[:, None]}


def test_block_groups_cover_the_sequence():
    """Groups tile [0, T) in order, at most max_groups of whole blocks plus one short block,
    and each reads keys up to its own last query."""
    for t, block, max_groups in ((32768, 128, 16), (40, 4, 3), (42, 4, 3), (12, 4, 16), (7, 4, 2)):
        groups = block_groups(t, block, max_groups)
        pos = 0
        for start, n, end in groups:
            assert start == pos and end > start
            assert end - start == n * block or (n == 1 and end == t and end - start < block)
            pos = end
        assert pos == t
        whole = [gr for gr in groups if gr[2] - gr[0] == gr[1] * block]
        assert len(whole) == min(t // block, max_groups) and len(groups) - len(whole) == int(t % block > 0)
    assert block_groups(32768, 128, 16)[0] == (0, 16, 2048)  # 256 blocks: 16 groups of 16


@pytest.mark.parametrize("t,block,max_groups", [(24, 2, 3), (26, 4, 2), (17, 3, 4)])
@pytest.mark.slow
def test_scanned_groups_equal_softmax_reference(t, block, max_groups):
    """Several blocks per group (a lax.scan), a short last block, G = 2 query heads per kv
    head: output and q/k/v gradients equal the reference under each mask, for the written-out
    backward and for the differentiated (checkpointed) blocks."""
    b, n, k, dh = 2, 4, 2, 8
    q, key, val = (jax.random.normal(jax.random.key(i), (b, t, h, dh)) for i, h in enumerate((n, k, k)))
    assert any(nb > 1 for _, nb, _ in block_groups(t, block, max_groups))
    loss = lambda f: lambda *a: jnp.sum(jnp.sin(f(*a)))  # noqa: E731
    for name, mask in _masks(t).items():
        ref = lambda q, key, val: _reference(q, key, val, mask, 0.3)  # noqa: E731
        want, want_grads = ref(q, key, val), jax.grad(loss(ref), argnums=(0, 1, 2))(q, key, val)
        for fused in (True, False):
            def scanned(q, key, val):
                return causal_block_attention(q, key, val, mask, 0.3, block=block, fused=fused,
                                              max_groups=max_groups)

            np.testing.assert_allclose(jax.jit(scanned)(q, key, val), want, atol=2e-6, err_msg=name)
            grads = jax.jit(jax.grad(loss(scanned), argnums=(0, 1, 2)))(q, key, val)
            for got, ref_g in zip(grads, want_grads):
                np.testing.assert_allclose(got, ref_g, atol=2e-5, err_msg=f"{name} fused={fused}")


@pytest.mark.slow
def test_program_size_does_not_grow_with_length():
    """With the groups saturated, 4x the length gives the same number of top-level jaxpr
    equations for the forward and gradient (each group's blocks are one scan), while the
    unscanned form (max_groups >= blocks) grows with the number of blocks."""
    def eqns(t, max_groups, fused):
        x = jnp.zeros((1, t, 2, 4))
        mask = jnp.tril(jnp.ones((t, t), bool))[None, None]
        f = lambda q, kv: jnp.sum(causal_block_attention(q, kv[:, :, :1], kv[:, :, :1], mask, 1.0, block=4,  # noqa: E731
                                                         fused=fused, max_groups=max_groups))
        return len(jax.make_jaxpr(jax.grad(f, argnums=(0, 1)))(x, x).eqns)

    for fused in (True, False):
        assert eqns(64, 4, fused) == eqns(256, 4, fused)  # 16 and 64 blocks, 4 groups each
        assert eqns(256, 64, fused) > 3 * eqns(64, 64, fused)  # 64 vs 16 unrolled blocks
