"""Token-level RL and SFT losses, computed in fp32.

Every loss returns an unreduced `(loss_sum, count)` (DESIGN.md, "Losses"): to average over
micro-batches or hosts, sum the sums and the counts, then divide once. Metrics are dicts of
`(sum, count)` pairs reduced the same way. `weights [B, T]` select and weight the completion
tokens (0 on prompt and padding).
"""

from __future__ import annotations

from typing import Dict, Tuple

import jax
import jax.numpy as jnp

Array = jax.Array
SumCount = Tuple[Array, Array]

AGGREGATIONS = ("token_mean", "seq_mean_token_mean")
POLICY_KINDS = ("cispo", "ppo")


def token_logprobs(logits: Array, targets: Array) -> Array:
    """`log softmax(logits)[b, t, targets[b, t]]` in fp32: `[B, T, V], [B, T] -> [B, T]`."""
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return jnp.take_along_axis(logp, targets[..., None].astype(jnp.int32), axis=-1)[..., 0]


def token_entropy(logits: Array) -> Array:
    """Entropy of the next-token distribution in fp32: `[B, T, V] -> [B, T]`."""
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return -jnp.sum(jnp.exp(logp) * logp, axis=-1)


def _check_aggregation(aggregation: str) -> None:
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation={aggregation!r}; allowed: {AGGREGATIONS}")


def aggregate(per_token: Array, weights: Array, mode: str = "token_mean") -> SumCount:
    """Reduce `per_token [B, T]` under `weights [B, T]` to `(sum, count)`.

    - "token_mean": sum of `w * x` over all tokens; count = sum of `w`.
    - "seq_mean_token_mean": each sequence's weighted mean, summed over sequences; count =
      number of sequences with positive total weight.
    """
    _check_aggregation(mode)
    if per_token.shape != weights.shape:
        raise ValueError(f"weights must have the shape of per_token {per_token.shape}; got {weights.shape}")
    x, w = per_token.astype(jnp.float32), weights.astype(jnp.float32)
    if mode == "token_mean":
        return jnp.sum(w * x), jnp.sum(w)
    row_weight = jnp.sum(w, axis=-1)
    live = row_weight > 0
    row_mean = jnp.sum(w * x, axis=-1) / jnp.where(live, row_weight, 1.0)
    return jnp.sum(jnp.where(live, row_mean, 0.0)), jnp.sum(live.astype(jnp.float32))


def policy_loss(new_logp: Array, old_logp: Array, advantages: Array, weights: Array, *,
                kind: str = "cispo", eps_low: float = 0.2, eps_high: float = 0.28,
                aggregation: str = "token_mean") -> Tuple[Array, Array, Dict[str, SumCount]]:
    """Clipped policy-gradient loss; returns `(loss_sum, count, metrics)`.

    `new_logp, old_logp, weights: [B, T]`; `advantages: [B]` (one per sequence) or `[B, T]`.
    With ratio `r = exp(new - old)` and `clip(r) = clip(r, 1 - eps_low, 1 + eps_high)`:

    - "ppo": `-min(r A, clip(r) A)` with asymmetric ("clip-higher") bounds (DAPO,
      arXiv 2503.14476, §3.1). Clipped tokens carry no gradient.
    - "cispo": `-stop_gradient(clip(r)) * A * new_logp` (MiniMax-M1, arXiv 2506.13585, §3.1;
      the RL objective of the PDR paper, arXiv 2510.01123). Every token keeps a gradient;
      only its importance weight is clipped.

    Metrics (token-weighted `(sum, count)`): "clip_fraction", the share of tokens where
    clipping is active (PPO: where the clipped term is the minimum and differs; CISPO: where
    `r` lies outside the bounds), and "ratio", the mean of `r`.
    """
    if kind not in POLICY_KINDS:
        raise ValueError(f"policy loss kind={kind!r}; allowed: {POLICY_KINDS}")
    _check_aggregation(aggregation)
    if not (eps_low >= 0 and eps_high >= 0):
        raise ValueError(f"eps_low={eps_low}, eps_high={eps_high}; both must be >= 0")
    for name, value in (("old_logp", old_logp), ("weights", weights)):
        if value.shape != new_logp.shape:
            raise ValueError(f"{name} must have the shape of new_logp {new_logp.shape}; got {value.shape}")
    if advantages.shape not in (new_logp.shape[:1], new_logp.shape):
        raise ValueError(f"advantages must have shape [B]={new_logp.shape[:1]} or [B, T]="
                         f"{new_logp.shape}; got {advantages.shape}")

    new_logp = new_logp.astype(jnp.float32)
    old_logp = jax.lax.stop_gradient(old_logp.astype(jnp.float32))
    adv = jax.lax.stop_gradient(jnp.asarray(advantages, jnp.float32))
    if adv.ndim == 1:
        adv = adv[:, None]
    adv = jnp.broadcast_to(adv, new_logp.shape)
    lo, hi = 1.0 - eps_low, 1.0 + eps_high
    ratio = jnp.exp(new_logp - old_logp)
    clipped_ratio = jnp.clip(ratio, lo, hi)

    if kind == "ppo":
        # -min(rA, clip(r)A), written with an explicit mask so ties at the bounds keep the
        # unclipped gradient.
        is_clipped = ((adv > 0) & (ratio > hi)) | ((adv < 0) & (ratio < lo))
        per_token = jnp.where(is_clipped, -jax.lax.stop_gradient(clipped_ratio) * adv, -ratio * adv)
    else:
        is_clipped = (ratio > hi) | (ratio < lo)
        per_token = -jax.lax.stop_gradient(clipped_ratio) * adv * new_logp

    loss_sum, count = aggregate(per_token, weights, aggregation)
    w = weights.astype(jnp.float32)
    token_count = jnp.sum(w)
    metrics = {
        "clip_fraction": (jnp.sum(w * is_clipped.astype(jnp.float32)), token_count),
        "ratio": (jnp.sum(w * jax.lax.stop_gradient(ratio)), token_count),
    }
    return loss_sum, count, metrics


def k3_kl(new_logp: Array, ref_logp: Array) -> Array:
    """Per-token k3 estimator of KL(new || ref): `exp(ref - new) - (ref - new) - 1` (Schulman,
    "Approximating KL divergence", 2020). Non-negative; aggregate with `aggregate`."""
    d = ref_logp.astype(jnp.float32) - new_logp.astype(jnp.float32)
    return jnp.exp(d) - d - 1.0


def sft_loss(logp: Array, weights: Array, aggregation: str = "token_mean") -> SumCount:
    """Negative log-likelihood of the completion tokens: `(sum, count)` of `-logp` under `weights`."""
    return aggregate(-logp.astype(jnp.float32), weights, aggregation)


def aux_sft_weights(weights: Array, correct: Array) -> Array:
    """`weights [B, T]` with the rows of incorrect rollouts zeroed (`correct [B]`), for the
    auxiliary SFT term on correct rollouts (PDR paper, arXiv 2510.01123, operator RL, alpha=0.1)."""
    if correct.shape != weights.shape[:1]:
        raise ValueError(f"correct must have shape [B]={weights.shape[:1]}; got {correct.shape}")
    return weights * correct.astype(bool).astype(weights.dtype)[:, None]
