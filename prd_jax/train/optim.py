"""Learning-rate schedule and optimizer: linear warmup, then cosine/linear decay; global-norm
clipping, then AdamW (Loshchilov & Hutter, arXiv 1711.05101) without decay on vector params."""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import jax
import optax

SCHEDULES = ("cosine", "linear", "constant")
NO_DECAY_SUFFIXES = ("scale", "bias")


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    """Optimizer hyper-parameters.

    The rate rises linearly from 0 to `learning_rate` over `warmup_steps`, then decays
    ("cosine" or "linear") to `end_lr_fraction * learning_rate` over the next `decay_steps`
    and stays there; "constant" holds `learning_rate` after warmup (decay fields unused).
    `grad_clip_norm=None` disables clipping.
    """

    learning_rate: float
    warmup_steps: int
    decay_steps: int
    schedule: str = "cosine"
    end_lr_fraction: float = 0.0
    weight_decay: float = 0.0
    b1: float = 0.9
    b2: float = 0.95
    eps: float = 1e-8
    grad_clip_norm: Optional[float] = 1.0

    def __post_init__(self):
        def fail(field, allowed):
            raise ValueError(f"OptimConfig.{field}={getattr(self, field)!r}; allowed: {allowed}")

        if self.schedule not in SCHEDULES:
            fail("schedule", SCHEDULES)
        if not self.learning_rate > 0:
            fail("learning_rate", "a float > 0")
        if not (isinstance(self.warmup_steps, int) and self.warmup_steps >= 0):
            fail("warmup_steps", "an int >= 0")
        if not isinstance(self.decay_steps, int) or self.decay_steps < (1 if self.schedule != "constant" else 0):
            fail("decay_steps", "an int >= 1 (>= 0 with schedule='constant')")
        if not 0.0 <= self.end_lr_fraction <= 1.0:
            fail("end_lr_fraction", "a float in [0, 1]")
        if not self.weight_decay >= 0:
            fail("weight_decay", "a float >= 0")
        for field in ("b1", "b2"):
            if not 0.0 <= getattr(self, field) < 1.0:
                fail(field, "a float in [0, 1)")
        if not self.eps > 0:
            fail("eps", "a float > 0")
        if self.grad_clip_norm is not None and not self.grad_clip_norm > 0:
            fail("grad_clip_norm", "a float > 0, or None to disable clipping")


def make_schedule(cfg: OptimConfig) -> optax.Schedule:
    """Step -> learning rate, as described in `OptimConfig`."""
    lr = cfg.learning_rate
    warmup = optax.linear_schedule(0.0, lr, max(cfg.warmup_steps, 1))
    if cfg.schedule == "cosine":
        decay = optax.cosine_decay_schedule(lr, cfg.decay_steps, alpha=cfg.end_lr_fraction)
    elif cfg.schedule == "linear":
        decay = optax.linear_schedule(lr, cfg.end_lr_fraction * lr, cfg.decay_steps)
    else:
        decay = optax.constant_schedule(lr)
    return optax.join_schedules([warmup, decay], boundaries=[cfg.warmup_steps])


def decay_mask(params):
    """Pytree of bools: True where weight decay applies.

    Vector-like params are exempt: 1-D leaves, and leaves whose name ends in "scale" (norm
    scales) or "bias". The name rule is needed because scanned layers stack params along a
    leading layer axis, so a norm scale is `[L, D]` and a bias `[L, heads, head_dim]`.
    """
    def decays(path, leaf):
        last = path[-1] if path else None
        name = str(getattr(last, "key", getattr(last, "name", "")))
        return leaf.ndim >= 2 and not name.endswith(NO_DECAY_SUFFIXES)

    return jax.tree_util.tree_map_with_path(decays, params)


def make_optimizer(cfg: OptimConfig, mask_fn: Callable = decay_mask) -> optax.GradientTransformation:
    """Global-norm clipping (if set), then AdamW on `make_schedule(cfg)`; weight decay only
    where `mask_fn(params)` is True."""
    adamw = optax.adamw(make_schedule(cfg), b1=cfg.b1, b2=cfg.b2, eps=cfg.eps,
                        weight_decay=cfg.weight_decay, mask=mask_fn)
    if cfg.grad_clip_norm is None:
        return adamw
    return optax.chain(optax.clip_by_global_norm(cfg.grad_clip_norm), adamw)
