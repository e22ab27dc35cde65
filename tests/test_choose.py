"""The one per-row token chooser (`sampling.choose_rows`) that the sampler and the serve
engine share: its filter against a numpy reference, top-k = 1 as argmax, and the serve
engine's mixed-row choice equal, row for row, to the sampler's choice at each row's settings."""

import jax
import jax.numpy as jnp
import numpy as np

from prd_jax.sampling import RowSampling, SamplingConfig, choose_rows, choose_tokens, filter_rows
from prd_jax.serve import slots

ROWS, VOCAB = 12, 300
SETTINGS = [(0.0, 1.0, 0), (1.0, 1.0, 0), (0.7, 1.0, 5), (1.0, 0.9, 0), (1.3, 0.6, 40), (0.5, 0.3, 1)]


def _logits(seed=1):
    logits = jax.random.normal(jax.random.key(seed), (ROWS, VOCAB)) * 3
    return logits.at[2, :5].set(9.0)  # ties at the top of row 2


def _reference_filter(x: np.ndarray, p: float, k: int) -> np.ndarray:
    """Top-k (ties at the k-th value kept), then the nucleus: in descending order, keep each
    token whose probability mass strictly above it is < p (float64)."""
    keep = np.ones(x.shape, bool)
    if k > 0:
        keep &= x >= np.sort(x)[::-1][k - 1]
    if p < 1.0:
        kept = np.sort(x[keep])[::-1]
        probs = np.exp(kept - kept.max())
        probs /= probs.sum()
        above = np.cumsum(probs) - probs
        keep &= x >= kept[above < p].min()
    return keep


def test_filter_rows_equals_a_numpy_reference_per_row():
    scaled = _logits()
    rng = np.random.default_rng(0)
    p = rng.choice([1.0, 0.95, 0.6, 0.2], ROWS).astype(np.float32)
    k = rng.choice([0, 1, 3, 40], ROWS).astype(np.int32)
    p[2], k[2] = 1.0, 3  # five-way tie at the top: top-3 keeps all five
    rows = RowSampling(jnp.ones(ROWS), jnp.asarray(p), jnp.asarray(k), top_k_bound=VOCAB, no_top_p=False)
    got = np.isfinite(np.asarray(filter_rows(scaled, rows)))
    x = np.asarray(scaled, np.float64)
    for r in range(ROWS):
        np.testing.assert_array_equal(got[r], _reference_filter(x[r], float(p[r]), int(k[r])), err_msg=f"row {r}")
    assert got[2].sum() == 5


def test_top_p_keeps_the_smallest_prefix_reaching_p():
    x = np.asarray(_logits(3), np.float64)
    for top_p in (0.1, 0.5, 0.9):
        got = np.isfinite(np.asarray(filter_rows(jnp.asarray(x, jnp.float32),
                                                 RowSampling.uniform(SamplingConfig(1, top_p=top_p), ROWS))))
        probs = np.exp(x - x.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        for r in range(ROWS):
            kept = probs[r][got[r]]
            assert kept.sum() >= top_p - 1e-6  # reaches p
            assert kept.sum() - kept[kept == kept.min()].sum() < top_p  # no smaller prefix does (ties kept together)
            assert probs[r][~got[r]].max(initial=0.0) <= kept.min()  # a prefix: nothing dropped above a kept one


def test_top_k_one_is_the_argmax_at_any_temperature():
    logits = _logits(5)[jnp.asarray([0, 1, 3, 4])]  # rows without ties
    keys = jax.random.split(jax.random.key(7), 4)
    for t in (0.3, 1.0, 2.5):
        toks = choose_rows(logits, keys, RowSampling.uniform(SamplingConfig(1, temperature=t, top_k=1), 4))
        np.testing.assert_array_equal(toks, jnp.argmax(logits, -1))


def test_serve_slots_choose_what_the_sampler_chooses_row_for_row():
    """Mixed rows (greedy, plain T, top-k, top-p, both) through the serve pool's settings
    (`slots.row_sampling`, one traced path for all rows) equal the sampler's uniform choice
    (`choose_tokens`, static paths) at each row's own settings, with the same keys."""
    logits = _logits()
    keys = jax.random.split(jax.random.key(2), ROWS)
    which = np.arange(ROWS) % len(SETTINGS)
    t, p, k = (jnp.asarray([SETTINGS[i][j] for i in which], dtype) for j, dtype in
               enumerate((jnp.float32, jnp.float32, jnp.int32)))
    pool = dict(logits=logits, temperature=t, top_p=p, top_k=k)
    for filtered in (True, False):
        served = np.asarray(jax.jit(lambda lg, ks, f=filtered: choose_rows(lg, ks, slots.row_sampling(
            dict(pool, logits=lg), f)))(logits, keys))
        for s, (temperature, top_p, top_k) in enumerate(SETTINGS):
            if not filtered and (top_p < 1.0 or top_k > 0):
                continue  # an unfiltered pool holds no filtering row
            scfg = SamplingConfig(1, temperature=temperature, top_p=top_p, top_k=top_k)
            alone = np.asarray(jax.jit(lambda lg, ks, c=scfg: choose_tokens(lg, ks, c))(logits, keys))
            np.testing.assert_array_equal(served[which == s], alone[which == s], err_msg=f"{SETTINGS[s]}")
    sampled = (np.asarray(t) > 0) & (np.asarray(k) != 1)  # rows that draw: not all of them the argmax
    assert (served[sampled] != np.asarray(jnp.argmax(logits, -1))[sampled]).any()
