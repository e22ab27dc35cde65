"""Advantages, token-level losses and the optimizer of `prd_jax.train`, against hand values."""

import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from prd_jax.train import advantages as adv_lib
from prd_jax.train import losses, optim

F32 = np.float32


# ---------------------------------------------------------------- advantages


def test_dr_grpo_and_rloo_by_hand():
    r = jnp.array([[1.0, 0.0, 0.0, 1.0]])
    np.testing.assert_allclose(adv_lib.dr_grpo(r), [[0.5, -0.5, -0.5, 0.5]], atol=1e-7)
    # r_i - mean(others): 1 - 1/3 and 0 - 2/3.
    np.testing.assert_allclose(adv_lib.rloo(r), [[2 / 3, -2 / 3, -2 / 3, 2 / 3]], atol=1e-6)


def test_grpo_divides_by_population_std():
    r = jnp.array([[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 2.0, 7.0]])
    mask = jnp.array([[1, 1, 1, 1], [1, 1, 1, 0]], bool)
    got = adv_lib.grpo(r, mask, eps=1e-6)
    s = math.sqrt(2 / 3)  # population std of (0, 1, 2)
    want = [[0.5 / (0.5 + 1e-6), -0.5 / (0.5 + 1e-6), -0.5 / (0.5 + 1e-6), 0.5 / (0.5 + 1e-6)],
            [-1 / (s + 1e-6), 0.0, 1 / (s + 1e-6), 0.0]]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    # A constant group has zero advantage, not NaN.
    np.testing.assert_array_equal(adv_lib.grpo(jnp.array([[3.0, 3.0]])), [[0.0, 0.0]])


def test_masked_entries_are_excluded_and_zero():
    r = jnp.array([[1.0, 0.0, 0.0, 5.0], [3.0, 7.0, 0.0, 0.0]])
    mask = jnp.array([[1, 1, 1, 0], [1, 0, 0, 0]], bool)
    np.testing.assert_allclose(adv_lib.dr_grpo(r, mask), [[2 / 3, -1 / 3, -1 / 3, 0], [0, 0, 0, 0]], atol=1e-6)
    # RLOO: 1 - mean(0, 0) = 1; 0 - mean(1, 0) = -0.5; a single valid sample gets 0.
    np.testing.assert_allclose(adv_lib.rloo(r, mask), [[1.0, -0.5, -0.5, 0.0], [0, 0, 0, 0]], atol=1e-6)


def test_batch_mean_baseline():
    r = jnp.array([[1.0, 0.0], [0.0, 0.0]])
    np.testing.assert_allclose(adv_lib.batch_mean_baseline(r), [[0.75, -0.25], [-0.25, -0.25]], atol=1e-7)
    mask = jnp.array([[1, 1], [1, 0]], bool)
    np.testing.assert_allclose(adv_lib.batch_mean_baseline(r, mask), [[2 / 3, -1 / 3], [-1 / 3, 0.0]], atol=1e-6)


def test_compute_dispatches_jits_and_rejects_unknown_kind():
    r = jnp.array([[1.0, 0.0, 0.0, 1.0]])
    fn = jax.jit(adv_lib.compute, static_argnums=0)
    for kind, direct in [("grpo", adv_lib.grpo), ("dr_grpo", adv_lib.dr_grpo), ("rloo", adv_lib.rloo),
                         ("batch_mean", adv_lib.batch_mean_baseline)]:
        np.testing.assert_allclose(fn(kind, r), direct(r), rtol=1e-6)
    np.testing.assert_allclose(fn("rloo", r), [[2 / 3, -2 / 3, -2 / 3, 2 / 3]], atol=1e-6)
    with pytest.raises(ValueError, match="'ppo'.*grpo.*dr_grpo.*rloo.*batch_mean"):
        adv_lib.compute("ppo", r)
    with pytest.raises(ValueError, match="mask"):
        adv_lib.dr_grpo(r, jnp.ones((1, 3), bool))


# ---------------------------------------------------------------- log-probs


def _np_log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def test_token_logprobs_and_entropy_match_numpy():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 3, 7)).astype(F32) * 3
    targets = rng.integers(0, 7, size=(2, 3))
    ref = _np_log_softmax(logits)
    want = np.take_along_axis(ref, targets[..., None], -1)[..., 0]
    # bf16 logits are upcast before the softmax.
    logits_bf = jnp.asarray(logits, jnp.bfloat16)
    want_bf = np.take_along_axis(_np_log_softmax(np.asarray(logits_bf, F32)), targets[..., None], -1)[..., 0]
    np.testing.assert_allclose(losses.token_logprobs(logits_bf, jnp.asarray(targets)), want_bf, rtol=1e-5, atol=1e-5)
    got32 = losses.token_logprobs(jnp.asarray(logits), jnp.asarray(targets))
    assert got32.dtype == jnp.float32
    np.testing.assert_allclose(got32, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(losses.token_entropy(jnp.asarray(logits)), -(np.exp(ref) * ref).sum(-1),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(losses.token_entropy(jnp.zeros((1, 1, 8))), [[math.log(8)]], rtol=1e-6)


# ---------------------------------------------------------------- aggregation


def test_aggregate_by_hand():
    x = jnp.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
    w = jnp.array([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    s, c = losses.aggregate(x, w, "token_mean")
    assert (float(s), float(c)) == (14.0, 4.0)
    s, c = losses.aggregate(x, w, "seq_mean_token_mean")  # 1.5 + 5.5; the empty row is skipped
    assert (float(s), float(c)) == (7.0, 2.0)
    with pytest.raises(ValueError, match="token_mean.*seq_mean_token_mean"):
        losses.aggregate(x, w, "mean")


@pytest.mark.parametrize("mode", losses.AGGREGATIONS)
def test_two_halves_sum_to_full_batch_mean(mode):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(4, 6)).astype(F32)
    lengths = np.array([6, 1, 3, 0])  # ragged rows, one empty
    w = (np.arange(6)[None, :] < lengths[:, None]).astype(F32)
    if mode == "token_mean":
        want = (x * w).sum() / w.sum()
    elif mode == "seq_mean_token_sum_norm":  # Dr. GRPO: all 4 rows (a constant) x the row width 6
        want = (x * w).sum() / (4 * 6)
    else:
        want = np.mean([(x[b] * w[b]).sum() / w[b].sum() for b in range(3)])
    s1, c1 = losses.aggregate(jnp.asarray(x[:2]), jnp.asarray(w[:2]), mode)
    s2, c2 = losses.aggregate(jnp.asarray(x[2:]), jnp.asarray(w[2:]), mode)
    s, c = losses.aggregate(jnp.asarray(x), jnp.asarray(w), mode)
    np.testing.assert_allclose(float(s / c), want, rtol=1e-5)
    np.testing.assert_allclose(float((s1 + s2) / (c1 + c2)), want, rtol=1e-5)
    # Averaging the halves' means instead would be wrong here (unequal counts); Dr. GRPO's
    # constant gives two halves of 2 rows equal counts, so there the two agree.
    if mode != "seq_mean_token_sum_norm":
        assert abs(float(s1 / c1 + s2 / c2) / 2 - want) > 1e-3


# ---------------------------------------------------------------- policy losses


def _policy(new, old, adv, w, **kw):
    return losses.policy_loss(jnp.asarray(new, F32), jnp.asarray(old, F32), jnp.asarray(adv, F32),
                              jnp.asarray(w, F32), **kw)


def test_policy_loss_values_by_hand():
    new = np.log(np.array([[0.5, 1.0, 2.0]], F32))
    old, w = np.zeros((1, 3), F32), np.ones((1, 3), F32)
    s, c, m = _policy(new, old, [1.0], w, kind="ppo", eps_low=0.2, eps_high=0.28)
    # -min(rA, clip(r)A) with A=1: -(0.5 + 1.0 + 1.28)
    np.testing.assert_allclose([float(s), float(c)], [-2.78, 3.0], rtol=1e-6)
    np.testing.assert_allclose(float(m["clip_fraction"][0] / m["clip_fraction"][1]), 1 / 3, rtol=1e-6)
    np.testing.assert_allclose(float(m["ratio"][0] / m["ratio"][1]), 3.5 / 3, rtol=1e-6)
    s, _, m = _policy(new, old, [-1.0], w, kind="ppo", eps_low=0.2, eps_high=0.28)
    np.testing.assert_allclose(float(s), 0.8 + 1.0 + 2.0, rtol=1e-6)  # max(r, clip(r)) with A=-1
    np.testing.assert_allclose(float(m["clip_fraction"][0]), 1.0)
    # CISPO clips the IS weight from above only: r = 0.5 keeps weight 0.5 (MiniMax-M1 §3.1) ...
    s, _, m = _policy(new, old, [2.0], w, kind="cispo", eps_low=0.2, eps_high=0.28)
    np.testing.assert_allclose(float(s), -2.0 * (0.5 * math.log(0.5) + 1.28 * math.log(2.0)), rtol=1e-6)
    np.testing.assert_allclose(float(m["clip_fraction"][0]), 1.0)
    # ... unless the lower bound is asked for: then 0.5 -> 0.8 and both ends count as clipped.
    s, _, m = _policy(new, old, [2.0], w, kind="cispo", eps_low=0.2, eps_high=0.28, cispo_lower_clip=True)
    np.testing.assert_allclose(float(s), -2.0 * (0.8 * math.log(0.5) + 1.28 * math.log(2.0)), rtol=1e-6)
    np.testing.assert_allclose(float(m["clip_fraction"][0]), 2.0)


def _grad_new(new, old, adv, w, **kw):
    def mean_loss(n):
        s, c, _ = losses.policy_loss(n, jnp.asarray(old), jnp.asarray(adv), jnp.asarray(w), **kw)
        return s / c
    return np.asarray(jax.grad(mean_loss)(jnp.asarray(new)))


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_clip_boundary_exactly_at_and_just_above(sign):
    x = F32(0.3)
    r_at = float(jnp.exp(jnp.asarray(x)))  # fp32 ratio; the bound is set to equal it exactly
    eps_high = r_at - 1.0
    old, w = np.zeros((1, 1), F32), np.ones((1, 1), F32)
    at, above = np.array([[x]], F32), np.array([[x + F32(1e-3)]], F32)
    kw = dict(eps_low=0.2, eps_high=eps_high)
    r_above = math.exp(float(above[0, 0]))
    # PPO, A>0: at the bound the token is not clipped and keeps d/dnew(-rA) = -rA; above, no gradient.
    for new, grad_ppo, frac in [(at, -sign * r_at, 0.0), (above, 0.0 if sign > 0 else -sign * r_above,
                                                          1.0 if sign > 0 else 0.0)]:
        np.testing.assert_allclose(_grad_new(new, old, [sign], w, kind="ppo", **kw), [[grad_ppo]], rtol=1e-5)
        _, _, m = _policy(new, old, [sign], w, kind="ppo", **kw)
        assert float(m["clip_fraction"][0]) == frac
    # CISPO keeps a gradient either way, with the ratio clipped to 1 + eps_high.
    np.testing.assert_allclose(_grad_new(at, old, [sign], w, kind="cispo", **kw), [[-sign * r_at]], rtol=1e-6)
    np.testing.assert_allclose(_grad_new(above, old, [sign], w, kind="cispo", **kw), [[-sign * r_at]], rtol=1e-6)
    _, _, m = _policy(above, old, [sign], w, kind="cispo", **kw)
    assert float(m["clip_fraction"][0]) == 1.0


def _random_batch(seed):
    rng = np.random.default_rng(seed)
    old = rng.normal(size=(4, 5)).astype(F32) - 2
    new = old + rng.uniform(-0.6, 0.6, size=(4, 5)).astype(F32)
    adv = np.array([1.5, -0.7, 0.4, -2.0], F32)
    w = (rng.uniform(size=(4, 5)) > 0.3).astype(F32) * rng.uniform(0.5, 1.5, size=(4, 5)).astype(F32)
    w[:, 0] = 1.0
    return new, old, adv, w


@pytest.mark.parametrize("lower_clip", [False, True])
def test_cispo_gradient_matches_closed_form(lower_clip):
    new, old, adv, w = _random_batch(2)
    r = np.exp(new.astype(np.float64) - old)
    clipped = np.clip(r, 0.8 if lower_clip else -np.inf, 1.28)
    assert (r > 1.28).any() and ((r < 0.8) & (w > 0)).any()  # the batch exercises both bounds
    kw = dict(kind="cispo", eps_low=0.2, eps_high=0.28, cispo_lower_clip=lower_clip)
    got = _grad_new(new, old, adv, w, **kw)
    np.testing.assert_allclose(got, -clipped * adv[:, None] * w / w.sum(), rtol=1e-5, atol=1e-7)
    got = _grad_new(new, old, adv, w, aggregation="seq_mean_token_mean", **kw)
    want = -clipped * adv[:, None] * w / w.sum(1, keepdims=True) / 4
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    _, _, m = _policy(new, old, adv, w, **kw)
    is_clipped = (r > 1.28) | ((r < 0.8) & lower_clip)
    np.testing.assert_allclose(float(m["clip_fraction"][0]), (w * is_clipped).sum(), rtol=1e-5)


def test_cispo_ratio_below_one_minus_eps_low_by_hand():
    # One token, A = -1, r = 0.5 < 1 - eps_low = 0.8: loss -w A new_logp, d/dnew = -w A.
    new, old, w = np.array([[math.log(0.5)]], F32), np.zeros((1, 1), F32), np.ones((1, 1), F32)
    for lower_clip, weight, frac in [(False, 0.5, 0.0), (True, 0.8, 1.0)]:
        kw = dict(kind="cispo", eps_low=0.2, eps_high=0.28, cispo_lower_clip=lower_clip)
        s, c, m = _policy(new, old, [-1.0], w, **kw)
        np.testing.assert_allclose(float(s), weight * math.log(0.5), rtol=1e-6)
        np.testing.assert_allclose(_grad_new(new, old, [-1.0], w, **kw), [[weight]], rtol=1e-6)
        assert float(m["clip_fraction"][0]) == frac
    # PPO is two-sided whatever CISPO does: A < 0, r < 0.8 -> clipped, no gradient.
    np.testing.assert_allclose(_grad_new(new, old, [-1.0], w, kind="ppo", eps_low=0.2, eps_high=0.28), [[0.0]])


def test_ppo_gradient_is_zero_on_clipped_tokens():
    new, old, adv, w = _random_batch(3)
    r = np.exp(new.astype(np.float64) - old)
    a = np.broadcast_to(adv[:, None], r.shape)
    clipped = ((a > 0) & (r > 1.28)) | ((a < 0) & (r < 0.8))
    assert clipped.any() and (~clipped & (w > 0)).any()
    got = _grad_new(new, old, adv, w, kind="ppo", eps_low=0.2, eps_high=0.28)
    np.testing.assert_allclose(got, np.where(clipped, 0.0, -r * a * w / w.sum()), rtol=1e-5, atol=1e-7)
    _, _, m = _policy(new, old, adv, w, kind="ppo", eps_low=0.2, eps_high=0.28)
    np.testing.assert_allclose(float(m["clip_fraction"][0] / m["clip_fraction"][1]),
                               (w * clipped).sum() / w.sum(), rtol=1e-6)
    np.testing.assert_allclose([float(m["ratio"][0]), float(m["ratio"][1])], [(w * r).sum(), w.sum()], rtol=1e-5)


def test_policy_loss_rejects_bad_arguments():
    new, old, adv, w = _random_batch(4)
    with pytest.raises(ValueError, match="'grpo'.*cispo.*ppo"):
        _policy(new, old, adv, w, kind="grpo")
    with pytest.raises(ValueError, match="'sum'.*token_mean"):
        _policy(new, old, adv, w, aggregation="sum")
    with pytest.raises(ValueError, match="advantages"):
        _policy(new, old, adv[:3], w)
    with pytest.raises(ValueError, match="weights"):
        _policy(new, old, adv, w[:, :3])
    with pytest.raises(ValueError, match="cispo_lower_clip=True needs kind='cispo'.*'ppo'"):
        _policy(new, old, adv, w, kind="ppo", cispo_lower_clip=True)


# ---------------------------------------------------------------- KL and SFT


def test_k3_kl():
    x = jnp.array([[-1.0, -2.5, -0.1]])
    np.testing.assert_array_equal(losses.k3_kl(x, x), np.zeros((1, 3)))
    got = losses.k3_kl(jnp.array([[0.0, 0.0]]), jnp.array([[math.log(2.0), -1.0]]))
    np.testing.assert_allclose(got, [[1.0 - math.log(2.0), math.exp(-1.0)]], rtol=1e-6)
    new, old, _, _ = _random_batch(5)
    assert (np.asarray(losses.k3_kl(jnp.asarray(new), jnp.asarray(old))) > 0).all()


def test_sft_loss_and_aux_weights():
    logp = jnp.array([[-1.0, -2.0, -3.0], [-4.0, -5.0, -6.0], [-0.5, -0.5, -0.5]])
    w = jnp.array([[0.0, 1.0, 1.0], [0.0, 0.0, 1.0], [1.0, 1.0, 0.0]])  # prompt tokens masked
    s, c = losses.sft_loss(logp, w)
    assert (float(s), float(c)) == (12.0, 5.0)
    aux = losses.aux_sft_weights(w, jnp.array([True, False, True]))
    np.testing.assert_array_equal(aux, [[0, 1, 1], [0, 0, 0], [1, 1, 0]])
    s, c = losses.sft_loss(logp, aux)
    assert (float(s), float(c)) == (6.0, 4.0)


# The auxiliary SFT term on correct rollouts, by hand. Completion tokens: row 0 has 2 (NLL 2 + 3),
# row 1 has 1 (incorrect), row 2 has 2 (NLL 0.5 + 0.5): C = 4 correct tokens, NLL sum 6.
AUX_LOGP = [[-1.0, -2.0, -3.0], [-4.0, -5.0, -6.0], [-0.5, -0.5, -0.5]]
AUX_W = [[0.0, 1.0, 1.0], [0.0, 0.0, 1.0], [1.0, 1.0, 0.0]]
AUX_CORRECT = [1.0, 0.0, 1.0]


@pytest.mark.parametrize("aggregation,normaliser,n,aux_sum,scale", [
    # token_mean: N = 5 completion tokens. correct_token_mean: 6 x 5/4 -> / N = 6/4 = 1.5.
    ("token_mean", "correct_token_mean", 5.0, 7.5, [1.25, 0.0, 1.25]),
    ("token_mean", "policy", 5.0, 6.0, None),  # / N = 6/5: correct tokens over all tokens
    # seq_mean_token_mean: N = 3 sequences. correct_token_mean: 6 x 3/4 -> / N = 1.5 again.
    ("seq_mean_token_mean", "correct_token_mean", 3.0, 4.5, [0.75, 0.0, 0.75]),
    ("seq_mean_token_mean", "policy", 3.0, 3.0, None),  # row means 2.5 + 0.5 -> / N = 1.0
])
def test_aux_sft_normalisers_by_hand(aggregation, normaliser, n, aux_sum, scale):
    logp, w, correct = jnp.asarray(AUX_LOGP), jnp.asarray(AUX_W), jnp.asarray(AUX_CORRECT)
    got, nll = losses.aux_sft_term(logp, w, correct, normaliser=normaliser, aggregation=aggregation)
    np.testing.assert_allclose(float(got), aux_sum, rtol=1e-6)
    assert (float(nll[0]), float(nll[1])) == (6.0, 4.0)  # metric: mean NLL of correct tokens 1.5
    assert float(losses.aggregate(jnp.zeros_like(w), w, aggregation)[1]) == n  # the policy count
    if scale is not None:
        np.testing.assert_allclose(losses.aux_sft_scale(w, correct, aggregation), scale, rtol=1e-6)
        np.testing.assert_allclose(float(got) / n, 1.5, rtol=1e-6)
        # the same with the scale given (as RLStage would pass the global one)
        given, _ = losses.aux_sft_term(logp, w, correct, normaliser=normaliser, aggregation=aggregation,
                                       scale=jnp.asarray(scale))
        np.testing.assert_allclose(float(given), aux_sum, rtol=1e-6)


def test_aux_sft_scale_per_block_and_without_correct_rows():
    w = jnp.array([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    # blocks [0, 1] and [2, 3]: N = 5, C = 2 -> 2.5; N = 4, C = 3 -> 4/3
    np.testing.assert_allclose(losses.aux_sft_scale(w, jnp.array([1.0, 0.0, 0.0, 1.0]), blocks=2),
                               [2.5, 0.0, 0.0, 4 / 3], rtol=1e-6)
    np.testing.assert_allclose(losses.aux_sft_scale(w, jnp.array([1.0, 0.0, 0.0, 1.0])),
                               [9 / 5, 0.0, 0.0, 9 / 5], rtol=1e-6)  # one block: N = 9, C = 5
    np.testing.assert_allclose(losses.aux_sft_scale(w, jnp.array([0.0, 0.0, 0.0, 1.0]), blocks=2),
                               [0.0, 0.0, 0.0, 4 / 3], rtol=1e-6)  # no correct token in block 0
    with pytest.raises(ValueError, match="blocks=3"):
        losses.aux_sft_scale(w, jnp.zeros(4), blocks=3)


@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean_token_mean"])
def test_aux_sft_correct_token_mean_is_exact_under_accumulation(aggregation):
    rng = np.random.default_rng(7)
    logp = -rng.uniform(0.1, 3.0, size=(8, 6)).astype(F32)
    lengths = np.array([6, 2, 5, 1, 4, 6, 3, 2])
    w = (np.arange(6)[None, :] < lengths[:, None]).astype(F32)
    correct = np.array([1, 0, 0, 0, 1, 1, 0, 1], F32)  # microbatches hold 2, 0, 1, 1 correct rows
    want = (-logp * w * correct[:, None]).sum() / (w * correct[:, None]).sum()
    scale = losses.aux_sft_scale(jnp.asarray(w), jnp.asarray(correct), aggregation)  # global
    total = count = local_total = 0.0
    for rows in np.split(np.arange(8), 4):
        lp, wm, cm = jnp.asarray(logp[rows]), jnp.asarray(w[rows]), jnp.asarray(correct[rows])
        s, _ = losses.aux_sft_term(lp, wm, cm, aggregation=aggregation, scale=scale[rows])
        total += float(s)
        count += float(losses.aggregate(jnp.zeros_like(wm), wm, aggregation)[1])
        local_total += float(losses.aux_sft_term(lp, wm, cm, aggregation=aggregation)[0])
    np.testing.assert_allclose(total / count, want, rtol=1e-5)
    assert abs(local_total / count - want) > 1e-2  # per-microbatch scales would not give the mean

    def term(lp):  # d/dlogp of the term after the division: -1/C on correct tokens
        s, _ = losses.aux_sft_term(lp, jnp.asarray(w), jnp.asarray(correct), aggregation=aggregation, scale=scale)
        return s / count
    np.testing.assert_allclose(jax.grad(term)(jnp.asarray(logp)), -w * correct[:, None] / (w * correct[:, None]).sum(),
                               rtol=1e-5, atol=1e-7)


def test_aux_sft_rejects_bad_arguments():
    logp, w = jnp.asarray(AUX_LOGP), jnp.asarray(AUX_W)
    with pytest.raises(ValueError, match="'sum'.*correct_token_mean.*policy"):
        losses.aux_sft_term(logp, w, jnp.ones(3), normaliser="sum")
    with pytest.raises(ValueError, match="correct must have shape"):
        losses.aux_sft_term(logp, w, jnp.ones(2))
    with pytest.raises(ValueError, match="scale must have shape"):
        losses.aux_sft_term(logp, w, jnp.ones(3), scale=jnp.ones(2))


# ---------------------------------------------------------------- optimizer


def test_schedules_by_hand():
    base = dict(learning_rate=2.0, warmup_steps=10, decay_steps=100, end_lr_fraction=0.1)
    cos = optim.make_schedule(optim.OptimConfig(schedule="cosine", **base))
    lin = optim.make_schedule(optim.OptimConfig(schedule="linear", **base))
    const = optim.make_schedule(optim.OptimConfig(schedule="constant", **base))
    for sched in (cos, lin, const):
        np.testing.assert_allclose([float(sched(0)), float(sched(5)), float(sched(10))], [0.0, 1.0, 2.0], rtol=1e-6)
    # cosine: 0.2 + 1.8 * (1 + cos(pi * k / 100)) / 2 at k steps into the decay
    np.testing.assert_allclose(float(cos(35)), 0.2 + 0.9 * (1 + math.cos(math.pi / 4)), rtol=1e-6)
    np.testing.assert_allclose(float(cos(60)), 1.1, rtol=1e-6)
    np.testing.assert_allclose(float(lin(35)), 2.0 - 1.8 * 0.25, rtol=1e-6)
    for sched in (cos, lin):
        np.testing.assert_allclose([float(sched(110)), float(sched(500))], [0.2, 0.2], rtol=1e-5)
    np.testing.assert_allclose(float(const(500)), 2.0)
    no_warmup = optim.make_schedule(optim.OptimConfig(1.0, warmup_steps=0, decay_steps=4, schedule="linear"))
    np.testing.assert_allclose([float(no_warmup(s)) for s in (0, 2, 4)], [1.0, 0.5, 0.0], atol=1e-7)


def test_weight_decay_skips_vector_params():
    params = {"w": jnp.ones((2, 3)), "b": jnp.ones((3,)),
              "layers": {"norm": {"scale": jnp.ones((4, 3))}, "q_bias": jnp.ones((4, 2, 3)),
                         "q": jnp.ones((4, 3, 2, 3))}}
    cfg = optim.OptimConfig(1.0, warmup_steps=0, decay_steps=0, schedule="constant", weight_decay=0.1)
    opt = optim.make_optimizer(cfg)
    zeros = jax.tree.map(jnp.zeros_like, params)
    updates, _ = jax.jit(opt.update)(zeros, opt.init(params), params)
    # With zero gradients only decoupled decay moves a param: -lr * wd * p.
    np.testing.assert_allclose(updates["w"], -0.1 * np.ones((2, 3)), rtol=1e-6)
    np.testing.assert_allclose(updates["layers"]["q"], -0.1 * np.ones((4, 3, 2, 3)), rtol=1e-6)
    for leaf in (updates["b"], updates["layers"]["norm"]["scale"], updates["layers"]["q_bias"]):
        np.testing.assert_array_equal(leaf, np.zeros(leaf.shape))


def test_decay_mask_on_model_params():
    from prd_jax.model import get_model_config
    from prd_jax.model.decoder import param_shapes

    shapes = param_shapes(get_model_config("tiny", family="qwen2"))
    mask = jax.tree_util.tree_leaves_with_path(optim.decay_mask(shapes))
    names = {jax.tree_util.keystr(p): m for p, m in mask}
    assert names["['embed']"] and names["['layers']['mlp']['up']"]
    assert not names["['final_norm']['scale']"] and not names["['layers']['attn_norm']['scale']"]
    assert not names["['layers']['attn']['q_bias']"]


def test_gradients_are_clipped_before_adam():
    b1, b2, eps = 0.9, 0.95, 1e-8
    cfg = optim.OptimConfig(0.5, 0, 0, schedule="constant", grad_clip_norm=1.0)
    opt = optim.make_optimizer(cfg)
    params = {"w": jnp.zeros((2,))}
    state = opt.init(params)
    g1, g2 = np.array([30.0, 40.0]), np.array([0.03, -0.04])
    for g in (g1,):
        _, state = opt.update({"w": jnp.asarray(g, F32)}, state, params)
    upd, _ = opt.update({"w": jnp.asarray(g2, F32)}, state, params)

    def adam_step2(first):
        m = b1 * (1 - b1) * first + (1 - b1) * g2
        v = b2 * (1 - b2) * first ** 2 + (1 - b2) * g2 ** 2
        return -0.5 * (m / (1 - b1 ** 2)) / (np.sqrt(v / (1 - b2 ** 2)) + eps)

    np.testing.assert_allclose(upd["w"], adam_step2(g1 / 50.0), rtol=1e-5)  # g1 clipped to norm 1
    assert not np.allclose(upd["w"], adam_step2(g1), rtol=1e-2)


@pytest.mark.parametrize("field,value,allowed", [
    ("schedule", "exponential", "cosine"), ("learning_rate", 0.0, "> 0"), ("decay_steps", 0, ">= 1"),
    ("end_lr_fraction", 1.5, r"\[0, 1\]"), ("weight_decay", -0.1, ">= 0"), ("b2", 1.0, r"\[0, 1\)"),
    ("grad_clip_norm", 0.0, "None"), ("warmup_steps", -1, ">= 0")])
def test_optim_config_validation(field, value, allowed):
    kw = dict(learning_rate=1e-6, warmup_steps=10, decay_steps=100)
    kw[field] = value
    with pytest.raises(ValueError, match=rf"OptimConfig\.{field}=.*allowed: .*{allowed}"):
        optim.OptimConfig(**kw)
    assert isinstance(optim.make_optimizer(optim.OptimConfig(1e-6, 10, 100)), optax.GradientTransformation)


@pytest.mark.parametrize("field,table", [("loss", losses.LOSSES), ("aggregation", losses.AGGREGATIONS),
                                         ("aux_sft_normaliser", losses.AUX_SFT_NORMALISERS)])
def test_rl_config_validates_against_the_loss_tables(field, table):
    """`RLConfig` accepts exactly the values of `losses`' tables and, for any other value,
    names the field and lists exactly the table."""
    import ast

    from prd_jax.train.rl import RLConfig

    for value in table:
        assert getattr(RLConfig(**{field: value}), field) == value
    with pytest.raises(ValueError) as e:
        RLConfig(**{field: "bogus"})
    msg = str(e.value)
    assert msg.startswith(f"config.rl.{field}='bogus'; allowed: "), msg
    assert ast.literal_eval(msg.split("allowed: ", 1)[1]) == tuple(table)
    # The loss functions reject the same values with the same list.
    with pytest.raises(ValueError, match=r"allowed: " + re.escape(str(tuple(table)))):
        if field == "loss":
            losses.policy_loss(jnp.zeros((1, 2)), jnp.zeros((1, 2)), jnp.zeros((1,)), jnp.ones((1, 2)),
                               kind="bogus")
        elif field == "aggregation":
            losses.aggregate(jnp.zeros((1, 2)), jnp.ones((1, 2)), "bogus")
        else:
            losses.aux_sft_term(jnp.zeros((1, 2)), jnp.ones((1, 2)), jnp.ones((1,)), normaliser="bogus")
