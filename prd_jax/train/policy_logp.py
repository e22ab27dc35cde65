"""Per-token log-probabilities of an RL batch under given params: the proximal policy of the
decoupled loss (`rl.decoupled`, `losses.policy_loss`) and the frozen KL reference
(`rl.kl_coef`), PDR paper §3.3.

One forward pass over the step's whole batch, run in the update's microbatches: `[A, B/A, T]`
rows over the batch mesh axes (`step.batch_shardings`), a `lax.map` over the A microbatches,
so the forward holds one microbatch's activations, as the update does, and never the whole
batch's. `prd-jax compile` builds the same program (`lowered`) and checks its fit.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from prd_jax.host import to_host
from prd_jax.model.decoder import forward
from prd_jax.train.chunked_xent import chunked_token_logprobs
from prd_jax.train.step import batch_shardings
from prd_jax.train.trainer import put_local

KEYS = ("inputs", "positions", "segment_ids", "targets")


def microbatches(rows: int, accum: int) -> int:
    """The microbatch count: the update's `grad_accum_steps` where it divides the rows, else 1."""
    return accum if accum >= 1 and rows % accum == 0 else 1


def micro_shapes(rows: int, width: int, accum: int) -> dict:
    """The abstract microbatched batch `[A, B/A, T]` of the forward's inputs."""
    a = microbatches(rows, accum)
    return {k: jax.ShapeDtypeStruct((a, rows // a, width), jnp.int32) for k in KEYS}


def logp_fn(cfg, mesh):
    """`(params, micro) -> [A, B/A, T]` fp32 log-probabilities of `micro["targets"]`."""
    def one(params, mb):
        hidden = forward(cfg, params, mb["inputs"], mb["positions"], segment_ids=mb["segment_ids"], mesh=mesh,
                         return_hidden=True)[0]
        return chunked_token_logprobs(cfg, params, hidden, mb["targets"], mesh=mesh)[0]

    return lambda params, micro: jax.lax.map(lambda mb: one(params, mb), micro)


def lowered(cfg, mesh, abstract_params, rows: int, width: int, accum: int):
    """The forward lowered for `prd-jax compile` (abstract params carry their shardings)."""
    shapes = micro_shapes(rows, width, accum)
    sh = batch_shardings(shapes, mesh)
    micro = {k: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh[k]) for k, s in shapes.items()}
    return jax.jit(logp_fn(cfg, mesh)).lower(abstract_params, micro)


class PolicyLogp:
    """`(params, host batch) -> [B, T]` numpy log-probabilities (every process: the whole batch)."""

    def __init__(self, cfg, mesh, rows: int, width: int, accum: int):
        self.rows, self.width = rows, width
        self.shapes = micro_shapes(rows, width, accum)
        self.shardings = batch_shardings(self.shapes, mesh)
        self.fn = jax.jit(logp_fn(cfg, mesh))

    def __call__(self, params, batch: dict) -> np.ndarray:
        rows, width = batch["targets"].shape
        if (rows, width) != (self.rows, self.width):
            raise ValueError(f"batch is {rows} x {width}; this forward was built for {self.rows} x {self.width}")
        placed = put_local({k: np.asarray(batch[k]) for k in KEYS}, list(range(rows)), self.shardings, self.shapes)
        return np.asarray(to_host(self.fn(params, placed))).reshape(rows, width)
