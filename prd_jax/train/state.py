"""Train state and its shardings: params (fp32 master weights), optimizer state, step, rng.

Params and the optimizer's param-shaped moments are sharded by the logical rules
(`mesh.LOGICAL_RULES`: fsdp, tensor); scalars are replicated. The model computes in
`ModelConfig.dtype` (bf16 on accelerators) from `param_dtype` (fp32) master weights.
"""

from __future__ import annotations

from typing import Any

import flax
import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding, PartitionSpec

from prd_jax.model.config import ModelConfig
from prd_jax.model.decoder import init_params, param_shapes
from prd_jax.model.weights import param_shardings

Array = jax.Array


@flax.struct.dataclass
class TrainState:
    """`step` int32 scalar, `params`, `opt_state`, `rng` (a typed PRNG key)."""

    step: Array
    params: Any
    opt_state: Any
    rng: Array


def state_shardings(cfg: ModelConfig, optimizer: optax.GradientTransformation, mesh) -> TrainState:
    """NamedShardings for every TrainState leaf: params by the logical rules, optimizer moments
    like their params, everything else replicated."""
    p_sh = param_shardings(cfg, mesh)
    replicated = NamedSharding(mesh, PartitionSpec())
    abstract_opt = jax.eval_shape(optimizer.init, param_shapes(cfg))
    opt_sh = optax.tree_map_params(optimizer, lambda _, s: s, abstract_opt, p_sh,
                                   transform_non_params=lambda _: replicated)
    return TrainState(replicated, p_sh, opt_sh, replicated)


def abstract_state(cfg: ModelConfig, optimizer, mesh) -> TrainState:
    """ShapeDtypeStructs (with shardings) of the train state, for compiling and restoring."""
    shapes = param_shapes(cfg)
    shardings = state_shardings(cfg, optimizer, mesh)
    opt = jax.eval_shape(optimizer.init, shapes)
    tree = TrainState(jax.ShapeDtypeStruct((), jnp.int32), shapes, opt,
                      jax.eval_shape(lambda: jax.random.key(0)))
    return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), tree, shardings)


def create_state(cfg: ModelConfig, optimizer, mesh, key: Array, params: Any = None) -> TrainState:
    """A fresh state placed in its shardings: random params from `key` unless `params` given."""
    shardings = state_shardings(cfg, optimizer, mesh)
    init_key, rng = jax.random.split(key)

    def build(params):
        params = init_params(cfg, init_key) if params is None else params
        return TrainState(jnp.int32(0), params, optimizer.init(params), rng)

    if params is None:
        return jax.jit(lambda: build(None), out_shardings=shardings)()
    return jax.jit(build, out_shardings=shardings)(params)
