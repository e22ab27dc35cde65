"""The router load-balancing term of a mixture-of-experts train step (issue 34).

With a model that has experts (`ModelConfig.num_experts` > 0) and
`ModelConfig.router_aux_loss_coef` = c > 0, the SFT and RL steps minimise

    L = L_task + c * (sum_mb aux_sum) / (sum_mb aux_count)

where each microbatch's `(aux_sum, aux_count)` comes from `decoder.forward_with_router_loss`
over its loss tokens (weight > 0): `aux_sum / aux_count` is the layers' mean of
`moe.load_balancing_loss`, the Switch Transformer loss `E * sum_e f_e * P_e` (Fedus et al.
2021, arXiv 2101.03961, Eqs. 4-6, in its top-k form), and the sums over microbatches weight
each by its token count (docs/design.md, "Principles").

`train_step` sums the task loss over the microbatches and divides once by the summed task
count N. So that the term comes out divided by the summed aux count A instead, each
microbatch adds `c * aux_sum * N / A` to its loss sum; N and A depend on the batch's weights
alone, and `with_scale` computes `N / A` for the whole update before any forward runs
(exact under any microbatch split, as `losses.aux_sft_scale` is for the auxiliary SFT term).

With c = 0 (the default) or a dense model nothing here runs: the step is the plain one.
"""

from __future__ import annotations

from typing import Callable, Optional

import jax
import jax.numpy as jnp

from prd_jax.model.decoder import forward, forward_with_router_loss

SCALE = "router_aux_scale"  # the batch key `with_scale` adds: N / A of the update, per microbatch
METRIC = "router_aux_loss"


def enabled(cfg) -> bool:
    """Whether a train step on `cfg` carries the router term (experts and a positive coef)."""
    return bool(cfg.is_moe) and cfg.router_aux_loss_coef > 0


def hidden_states(cfg, params, b: dict, mesh=None) -> tuple:
    """(final hidden states `[B, T, D]`, `(aux_sum, aux_count)` or None) of microbatch `b`
    (`inputs`, `positions`, `segment_ids`, `weights`). With the term off this is the plain
    `forward(..., return_hidden=True)`; on, the router loss is over the tokens whose weight is
    positive (the loss tokens)."""
    if not enabled(cfg):
        out, _ = forward(cfg, params, b["inputs"], b["positions"], segment_ids=b["segment_ids"], mesh=mesh,
                         return_hidden=True)
        return out, None
    return forward_with_router_loss(cfg, params, b["inputs"], b["positions"], segment_ids=b["segment_ids"],
                                    token_mask=b["weights"] > 0, mesh=mesh, return_hidden=True)


def add_term(cfg, total, aux: Optional[tuple], b: dict, count, metrics: dict):
    """`total` plus `c * aux_sum * N / A` (module docstring); records the metric
    `router_aux_loss` as `(aux_sum, aux_count)`. `b[SCALE]` is the update's `N / A`
    (`with_scale`); without it (a call on a whole batch, e.g. the eval loss) the
    microbatch's own `count / aux_count`. `aux` None (term off): `total` unchanged."""
    if aux is None:
        return total
    aux_sum, aux_count = aux
    metrics[METRIC] = (jax.lax.stop_gradient(aux_sum), aux_count)
    scale = b.get(SCALE)
    if scale is None:
        scale = jnp.where(aux_count > 0, count / jnp.maximum(aux_count, 1.0), 0.0)
    return total + cfg.router_aux_loss_coef * aux_sum * jax.lax.stop_gradient(jnp.asarray(scale, jnp.float32))


def attach(loss: Callable, cfg, task_count: Callable) -> Callable:
    """Mark `loss` as carrying the router term when `enabled(cfg)`: `train_step` then calls
    `loss.router_aux_counts(microbatch) -> (N_mb, A_mb)` (`task_count(microbatch)`, the loss
    fn's own count from the weights alone, and the number of loss tokens) through `with_scale`."""
    if enabled(cfg):
        loss.router_aux_counts = lambda mb: (jnp.asarray(task_count(mb), jnp.float32),
                                             jnp.sum((mb["weights"] > 0).astype(jnp.float32)))
    return loss


def with_scale(batch: dict, counts: Callable) -> dict:
    """The microbatched batch `[A, ...]` with `SCALE [A]` = (sum N) / (sum A) over all its
    microbatches (0 when no token carries loss), for `add_term`."""
    n, a = jax.vmap(counts)(batch)
    n_total, a_total = jnp.sum(n), jnp.sum(a)
    scale = jnp.where(a_total > 0, n_total / jnp.maximum(a_total, 1.0), 0.0)
    return {**batch, SCALE: jnp.broadcast_to(scale, n.shape)}
