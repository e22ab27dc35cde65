"""One sampler decode step as its own program, for per-step costs (`prd-jax compile --estimate`).

XLA's cost analysis counts a `while` body once (`aot.hlo_cost`), so the sampler's program
(prefill, decode weights, one or more decode loops) cannot give per-step figures. This
program is the decode loop's body alone (`sampling.decode_loop._decode_unrolled`): choose
each row's token from its logits (`choose_tokens`, the call's sampling settings), its
log-probability, and one token per row through the unrolled layers (`decode_step_groups`),
writing each layer's cache slot in place (the caches are donated, as the loop carries them).

Its arguments are laid out as in the loop: the decode weights (`decode_weights`) with the
shardings XLA gives them when it derives them from the sharded params (read from that small
program's compiled output shardings), the per-layer caches in the decode layout
(`DECODE_CACHE_AXES`), rows over the batch axes. Shapes: the call's rows in flight (one row
chunk, `row_chunks`) and a full cache, `prompt + max_new_tokens` slots (a sliding layer's
ring at most its window): the last step's cost, the largest of a call (`cache_window` starts
smaller; compaction later runs fewer rows).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

from prd_jax.mesh import batch_size_multiple, named_sharding
from prd_jax.model.config import ModelConfig
from prd_jax.model.decode import DECODE_CACHE_AXES, decode_step_groups, decode_weights
from prd_jax.model.decoder import param_shapes
from prd_jax.model.weights import param_shardings
from prd_jax.sampling import SamplingConfig, chosen_logprob, choose_tokens, row_chunks


def rows_in_flight(prompts: int, scfg: SamplingConfig, mesh) -> int:
    """Decode rows of one row chunk, as `generate` cuts a call (`row_chunks`)."""
    chunks = row_chunks(prompts, scfg.num_samples, scfg.max_rows, batch_size_multiple(mesh))
    return prompts // chunks * scfg.num_samples


def abstract_params(cfg: ModelConfig, mesh):
    """The params' shapes with their shardings on `mesh` (`param_shardings`)."""
    return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
                        param_shapes(cfg), param_shardings(cfg, mesh))


def abstract_weights(cfg: ModelConfig, mesh):
    """The decode weights' shapes with the shardings XLA derives from the sharded params."""
    fn = jax.jit(functools.partial(decode_weights, cfg, mesh=mesh))
    compiled = fn.lower(abstract_params(cfg, mesh)).compile()
    shapes = jax.eval_shape(fn, abstract_params(cfg, mesh))
    return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), shapes,
                        compiled.output_shardings)


def _struct(shape, dtype, names, mesh):
    return jax.ShapeDtypeStruct(shape, dtype, sharding=named_sharding(names, mesh, shape))


def abstract_caches(cfg: ModelConfig, mesh, rows: int, slots: int, dtype=None) -> tuple:
    """Per-layer decode caches, keys `[B, K, Dh, S]`, values `[B, K, S, Dh]` (S: the layer's ring
    when it slides), in `dtype` (`kv_cache_dtype`; None = the model's compute dtype)."""
    dt = jnp.dtype(dtype or cfg.dtype)
    out = []
    for i in range(cfg.num_layers):
        window = cfg.layer_window(i)
        s = slots if window is None else min(slots, window)
        k, h = cfg.num_kv_heads, cfg.head_dim
        out.append((_struct((rows, k, h, s), dt, DECODE_CACHE_AXES[0], mesh),
                    _struct((rows, k, s, h), dt, DECODE_CACHE_AXES[1], mesh)))
    return tuple(out)


def decode_step_lowered(cfg: ModelConfig, mesh, scfg: SamplingConfig, rows: int, prompt_len: int, gen_len: int,
                        weights=None):
    """The lowered step for `rows` rows over caches of `prompt_len + gen_len` slots (`weights`:
    `abstract_weights(cfg, mesh)`, computed here when not given)."""
    width = prompt_len

    def step(weights, caches, logits, keys, start, t):
        folded = jax.vmap(jax.random.fold_in, in_axes=(0, None))(keys, t)
        tok = choose_tokens(logits, folded, scfg)
        lp = chosen_logprob(logits, tok)
        logits, (caches,) = decode_step_groups(cfg, weights, tok, width + t - start, ((caches, start, width + t),),
                                               mesh=mesh)
        return logits, caches, tok, lp

    key_dtype = jax.eval_shape(lambda: jax.random.key(0)).dtype
    batch = ("batch",)
    caches = abstract_caches(cfg, mesh, rows, prompt_len + gen_len, scfg.kv_cache_dtype or None)
    args = (weights or abstract_weights(cfg, mesh), caches,
            _struct((rows, cfg.vocab_size), jnp.float32, ("batch", "vocab"), mesh),
            _struct((rows,), key_dtype, batch, mesh), _struct((rows,), jnp.int32, batch, mesh),
            jax.ShapeDtypeStruct((), jnp.int32, sharding=NamedSharding(mesh, P())))
    return jax.jit(step, donate_argnums=(1, 2)).lower(*args)
