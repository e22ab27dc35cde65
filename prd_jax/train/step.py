"""One jitted optimizer step over accumulated microbatches, for any (sum, count) loss.

A non-finite loss or gradient norm rejects the update (metric `nonfinite`); the trainer
halts after `config.max_nonfinite_steps` such steps in a row.

`loss_fn(params, microbatch) -> (loss_sum, count, metrics)` where metrics maps names to
(sum, count) pairs (docs/design.md: losses return sums, so accumulation and multi-host
reduction give the true mean). The step scans over the microbatches `[A, B/A, ...]`,
sums gradients of `loss_sum`, and divides by the total count once: the update equals
the single-batch update on the whole batch (tested). Compiled ahead of time with explicit
in/out shardings and a donated state; the memory analysis is logged.
"""

from __future__ import annotations

import logging
from typing import Callable

import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding, PartitionSpec

from prd_jax.mesh import logical_to_spec
from prd_jax.train import router_aux
from prd_jax.train.state import TrainState

log = logging.getLogger(__name__)


def split_microbatches(batch: dict, accum: int) -> dict:
    """`[B, ...]` -> `[accum, B/accum, ...]` (B must divide)."""
    def split(x):
        if x.shape[0] % accum:
            raise ValueError(f"batch size {x.shape[0]} is not divisible by grad_accum_steps={accum}")
        return x.reshape(accum, x.shape[0] // accum, *x.shape[1:])

    return jax.tree.map(split, batch)


def train_step(state: TrainState, batch: dict, *, loss_fn: Callable, optimizer, schedule=None):
    """Accumulate over `batch` (leading microbatch axis), apply one update; returns (state, metrics).

    A loss fn with `router_aux_counts` (a mixture-of-experts model with the router term on,
    `router_aux.attach`) gets the update's normaliser ratio in every microbatch
    (`router_aux.with_scale`)."""
    counts = getattr(loss_fn, "router_aux_counts", None)
    if counts is not None:
        batch = router_aux.with_scale(batch, counts)

    def grad(mb):
        return jax.value_and_grad(lambda p: _split(loss_fn(p, mb)), has_aux=True)(state.params)

    def micro(carry, mb):
        grads, total, count, sums = carry
        (s, (c, m)), g = grad(mb)
        sums = jax.tree.map(jnp.add, sums, m)
        return (jax.tree.map(jnp.add, grads, g), total + s, count + c, sums), None

    first = jax.tree.map(lambda x: x[0], batch)
    if jax.tree.leaves(batch)[0].shape[0] == 1:  # one microbatch: no scan, no zero-filled accumulators
        (total, (count, sums)), grads = grad(first)
    else:
        _, (_, m0) = jax.eval_shape(lambda: _split(loss_fn(state.params, first)))
        zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), m0)
        g0 = jax.tree.map(jnp.zeros_like, state.params)
        (grads, total, count, sums), _ = jax.lax.scan(micro, (g0, 0.0, 0.0, zeros), batch)
    denom = jnp.maximum(count, 1.0)
    grads = jax.tree.map(lambda g: g / denom, grads)
    grad_norm = optax.tree.norm(grads)
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    # A non-finite loss or gradient rejects the update: params and optimizer state stay.
    finite = jnp.isfinite(total) & jnp.isfinite(grad_norm)
    keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(finite, a, b), new, old)
    params, opt_state = keep(params, state.params), keep(opt_state, state.opt_state)
    metrics = {name: s / jnp.maximum(c, 1.0) for name, (s, c) in sums.items()}
    metrics.update(loss=total / denom, tokens=count, grad_norm=grad_norm, param_norm=optax.tree.norm(params),
                   nonfinite=1.0 - finite.astype(jnp.float32))
    if schedule is not None:
        metrics["learning_rate"] = schedule(state.step)
    return state.replace(step=state.step + finite.astype(jnp.int32), params=params, opt_state=opt_state), metrics


def minibatch_updates(step_fn: Callable, minibatches: int = 1, epochs: int = 1) -> Callable:
    """`epochs` passes over one rollout batch, each cut into `minibatches` mini-batches with one
    optimizer update apiece, in order (PPO, arXiv 1707.06347, §5, Alg. 1; RL's mu updates per
    batch when `minibatches` is 1). Metrics are averaged over all updates.

    The batch arrives microbatched `[A, B/A, ...]` (A = grad_accum_steps); mini-batch k is
    microbatches [k A/m, (k+1) A/m), i.e. rows [k B/m, (k+1) B/m) (`RLStage` shuffles rows
    when m > 1 so each mini-batch mixes generator and verifier rows). Cutting along A keeps
    each device's rows where they are.
    """
    if minibatches < 1 or epochs < 1:
        raise ValueError(f"minibatches={minibatches}, epochs={epochs}; both must be >= 1")
    if minibatches == 1 and epochs == 1:
        return step_fn

    def cut(x):
        if x.shape[0] % minibatches:
            raise ValueError(f"grad_accum_steps={x.shape[0]} is not divisible by config.rl.minibatches="
                             f"{minibatches} (a mini-batch is a whole number of microbatches)")
        return x.reshape(minibatches, x.shape[0] // minibatches, *x.shape[1:])

    def run(state, batch):
        parts = jax.tree.map(cut, batch)
        epoch = lambda s, _: jax.lax.scan(step_fn, s, parts)
        state, metrics = jax.lax.scan(epoch, state, None, length=epochs)
        return state, jax.tree.map(lambda m: jnp.mean(m, axis=(0, 1)), metrics)

    return run


def _split(out):
    loss_sum, count, metrics = out
    return loss_sum, (jnp.asarray(count, jnp.float32), metrics)


def batch_shardings(batch_shapes: dict, mesh) -> dict:
    """Microbatched arrays `[A, B, ...]`: B over the batch mesh axes (data, fsdp)."""
    def spec(x):
        names = (None, "batch") + (None,) * (len(x.shape) - 2)
        return NamedSharding(mesh, logical_to_spec(names, mesh, x.shape))

    return jax.tree.map(spec, batch_shapes)


def compile_step(step_fn: Callable, abstract_state, abstract_batch: dict, mesh, state_sh):
    """`.lower().compile()` the step with explicit shardings and a donated state; logs memory."""
    batch_sh = batch_shardings(abstract_batch, mesh)
    replicated = NamedSharding(mesh, PartitionSpec())
    jitted = jax.jit(step_fn, in_shardings=(state_sh, batch_sh), out_shardings=(state_sh, replicated),
                     donate_argnums=0)
    compiled = jitted.lower(abstract_state, abstract_batch).compile()
    try:
        mem = compiled.memory_analysis()
        log.info("train step compiled: arguments %.1f MiB, outputs %.1f MiB, temporaries %.1f MiB",
                 mem.argument_size_in_bytes / 2 ** 20, mem.output_size_in_bytes / 2 ** 20,
                 mem.temp_size_in_bytes / 2 ** 20)
    except Exception as e:  # memory analysis is backend-dependent
        log.info("train step compiled (no memory analysis: %s)", e)
    return compiled, batch_sh
