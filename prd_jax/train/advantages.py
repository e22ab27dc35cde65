"""Group-relative advantages for RL over rewards `[P, G]` (P prompts x G samples each).

Every function takes fp32-castable `rewards [P, G]` and an optional validity `mask [P, G]`
(True = the sample counts). Masked entries never enter a baseline and get advantage 0.
All functions are pure and jittable (`compute`'s `kind` must be static).
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp

Array = jax.Array

KINDS = ("grpo", "dr_grpo", "rloo", "batch_mean")


def _prepare(rewards, mask) -> tuple[Array, Array]:
    """Rewards as fp32 `[P, G]` and the mask as fp32 0/1 of the same shape."""
    rewards = jnp.asarray(rewards, jnp.float32)
    if rewards.ndim != 2:
        raise ValueError(f"rewards must have shape [P, G] (prompts x samples); got shape {rewards.shape}")
    if mask is None:
        return rewards, jnp.ones_like(rewards)
    mask = jnp.asarray(mask)
    if mask.shape != rewards.shape:
        raise ValueError(f"mask must have the shape of rewards {rewards.shape}; got {mask.shape}")
    return rewards, mask.astype(bool).astype(jnp.float32)


def _group_stats(rewards: Array, mask: Array) -> tuple[Array, Array]:
    """Per-group valid count `[P, 1]` and masked mean `[P, 1]` (0 for empty groups)."""
    count = jnp.sum(mask, axis=1, keepdims=True)
    mean = jnp.sum(rewards * mask, axis=1, keepdims=True) / jnp.maximum(count, 1.0)
    return count, mean


def grpo(rewards, mask: Optional[Array] = None, eps: float = 1e-6) -> Array:
    """GRPO: `(r - group mean) / (group std + eps)` (DeepSeekMath, arXiv 2402.03300, §4.1.2).

    The std is the population std (ddof=0) over the group's valid samples.
    """
    rewards, mask = _prepare(rewards, mask)
    count, mean = _group_stats(rewards, mask)
    var = jnp.sum(jnp.square(rewards - mean) * mask, axis=1, keepdims=True) / jnp.maximum(count, 1.0)
    return (rewards - mean) / (jnp.sqrt(var) + eps) * mask


def dr_grpo(rewards, mask: Optional[Array] = None) -> Array:
    """Dr. GRPO: `r - group mean`, no std normalisation (Liu et al., arXiv 2503.20783, §3).

    Dr. GRPO's other half, the loss's constant denominator (no 1/|o_i| length term), is
    `losses.aggregate(..., "seq_mean_token_sum_norm")`: every row of the batch counts there,
    masked ones too, so masking a row here (advantage 0) never changes the normaliser."""
    rewards, mask = _prepare(rewards, mask)
    _, mean = _group_stats(rewards, mask)
    return (rewards - mean) * mask


def rloo(rewards, mask: Optional[Array] = None) -> Array:
    """RLOO: `r_i` minus the mean of the group's *other* valid samples (Ahmadian et al.,
    arXiv 2402.14740). Groups with fewer than two valid samples get 0."""
    rewards, mask = _prepare(rewards, mask)
    count = jnp.sum(mask, axis=1, keepdims=True)
    total = jnp.sum(rewards * mask, axis=1, keepdims=True)
    others_mean = (total - rewards) / jnp.maximum(count - 1.0, 1.0)
    return jnp.where(count > 1.0, rewards - others_mean, 0.0) * mask


def batch_mean_baseline(rewards, mask: Optional[Array] = None) -> Array:
    """`r - mean over all valid entries of the batch`: the V1-PairRL verifier baseline when
    `rl.verifier_baseline="batch"` (V1, arXiv 2603.04304, §5); the default there is the
    per-prompt group mean (`dr_grpo` over the verifier rows of one prompt)."""
    rewards, mask = _prepare(rewards, mask)
    mean = jnp.sum(rewards * mask) / jnp.maximum(jnp.sum(mask), 1.0)
    return (rewards - mean) * mask


_FUNCTIONS = {"grpo": grpo, "dr_grpo": dr_grpo, "rloo": rloo, "batch_mean": batch_mean_baseline}


def compute(kind: str, rewards, mask: Optional[Array] = None) -> Array:
    """Advantages `[P, G]` of the estimator `kind`, one of `KINDS`."""
    if kind not in _FUNCTIONS:
        raise ValueError(f"advantage kind={kind!r}; allowed: {KINDS}")
    return _FUNCTIONS[kind](rewards, mask)
