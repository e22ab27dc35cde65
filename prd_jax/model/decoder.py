"""Decoder-only transformer (Flax Linen) for the Llama-3 / SmolLM2, Qwen2.5 and Qwen3 families.

`forward(cfg, params, tokens, positions, cache)` is the pure entry point: it returns
`(logits, new_cache)`. Layers are stacked and run with `nn.scan` (docs/design.md,
"Model"); the KV cache is `[L, B, S, K, Dh]` and travels in the
scan carry so each step writes one token in place instead of copying the cache.

Cache semantics (left-padded rows): all rows share one write slot `cache.index`; row b's
valid keys start at slot `cache.start[b]` (its left padding ends there). A call with T new
tokens writes them at slots `index .. index+T-1` with one in-place `dynamic_update_slice`,
and query t of row b attends to slots `start[b] <= j <= index + t`. Positions are passed
explicitly (for row b, slot minus `start[b]`), so a ragged batch gives each row the result
it would get alone. The returned cache has `index + T`.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from prd_jax.mesh import named_sharding
from prd_jax.model.attention import SAVED_NAMES, causal_block_attention
from prd_jax.model.config import ModelConfig, RopeScaling, YarnScaling
from prd_jax.model.moe import MoE, load_balancing_loss, moe_tokens
from prd_jax.model.sinks import sink_attention

Array = jax.Array
_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
_POLICIES = jax.checkpoint_policies
# `ModelConfig.remat`; "none" runs no remat. The partial policies also keep the fused attention's
# output and log-sum-exp, which its written-out backward reads (`attention` module docstring).
_KEEP_ATTENTION = _POLICIES.save_only_these_names(*SAVED_NAMES)
REMAT_POLICY = {"full": None,
                "dots": _POLICIES.save_from_both_policies(_POLICIES.checkpoint_dots, _KEEP_ATTENTION),
                "dots_no_batch": _POLICIES.save_from_both_policies(
                    _POLICIES.dots_with_no_batch_dims_saveable, _KEEP_ATTENTION)}


@flax.struct.dataclass
class KVCache:
    """Per-layer keys/values `[L, B, S, K, Dh]`, per-row first valid slot `start [B]`, and
    the shared next write slot `index` (scalar)."""

    k: Array
    v: Array
    start: Array
    index: Array

    @property
    def capacity(self) -> int:
        return self.k.shape[2]


def init_cache(cfg: ModelConfig, batch: int, capacity: int, dtype: Any = None) -> KVCache:
    """An empty cache for `batch` rows of up to `capacity` tokens."""
    dtype = dtype or _DTYPES[cfg.dtype]
    shape = (cfg.num_layers, batch, capacity, cfg.num_kv_heads, cfg.head_dim)
    return KVCache(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype), jnp.zeros((batch,), jnp.int32),
                   jnp.zeros((), jnp.int32))


CACHE_AXES = ("layers", "batch", "cache_length", "kv_heads", "head_dim")


def _constrain(x: Array, names: tuple, mesh: Optional[Mesh]) -> Array:
    if mesh is None:
        return x
    return jax.lax.with_sharding_constraint(x, named_sharding(names, mesh, x.shape))


def rope_inv_freq(head_dim: int, theta: float, scaling: Optional[RopeScaling]) -> Array:
    """RoPE inverse frequencies; with `scaling`, Llama-3.1's smooth low/high-frequency rule
    (`RopeScaling`) or YaRN's ramp (`YarnScaling`)."""
    inv = 1.0 / (theta ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim))
    if scaling is None:
        return inv
    if isinstance(scaling, YarnScaling):
        return _yarn_inv_freq(inv, head_dim, theta, scaling)
    wavelen = 2 * math.pi / inv
    low_wavelen = scaling.original_max_position / scaling.low_freq_factor
    high_wavelen = scaling.original_max_position / scaling.high_freq_factor
    smooth = (scaling.original_max_position / wavelen - scaling.low_freq_factor) / (
        scaling.high_freq_factor - scaling.low_freq_factor)
    mid = (1 - smooth) * inv / scaling.factor + smooth * inv
    return jnp.where(wavelen < high_wavelen, inv, jnp.where(wavelen > low_wavelen, inv / scaling.factor, mid))


def _yarn_inv_freq(inv: Array, head_dim: int, theta: float, s: YarnScaling) -> Array:
    """YaRN (arXiv 2309.00071, Sec. 3.2): rotary pair i keeps `inv_i` where its wavelength fits
    more than `beta_fast` times in the original context, is divided by `factor` where it fits
    fewer than `beta_slow` times, with a linear ramp over i between the two."""
    def dim_for(rotations):  # the pair index whose wavelength fits `rotations` times
        return head_dim * math.log(s.original_max_position / (rotations * 2 * math.pi)) / (2 * math.log(theta))
    low, high = dim_for(s.beta_fast), dim_for(s.beta_slow)
    if s.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001
    ramp = jnp.clip((jnp.arange(head_dim // 2, dtype=jnp.float32) - low) / (high - low), 0, 1)
    return inv / s.factor * ramp + inv * (1 - ramp)


def rope_tables(cfg: ModelConfig, positions: Array) -> tuple:
    """cos / sin `[..., Dh/2]` of `positions [...]` (times YaRN's attention factor, if any)."""
    angles = positions.astype(jnp.float32)[..., None] * rope_inv_freq(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling)
    mscale = cfg.rope_scaling.mscale if isinstance(cfg.rope_scaling, YarnScaling) else 1.0
    return jnp.cos(angles) * mscale, jnp.sin(angles) * mscale


def apply_rope(x: Array, cos: Array, sin: Array) -> Array:
    """Rotate `x [B, T, N, Dh]` by position (half-split layout, as in HF Llama/Qwen)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half].astype(jnp.float32), x[..., half:].astype(jnp.float32)
    cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)


class RMSNorm(nn.Module):
    """RMSNorm with a learned scale, computed in fp32."""

    eps: float
    param_dtype: Any = jnp.float32
    axis_name: str = "norm"

    @nn.compact
    def __call__(self, x: Array) -> Array:
        scale = self.param("scale", nn.with_logical_partitioning(nn.initializers.ones, (self.axis_name,)),
                           (x.shape[-1],), self.param_dtype)
        x32 = x.astype(jnp.float32)
        y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return (y * scale.astype(jnp.float32)).astype(x.dtype)


def _dense(module: nn.Module, name: str, shape: tuple, axes: tuple, cfg: ModelConfig, fan_in: int):
    init = nn.initializers.normal(stddev=1.0 / math.sqrt(fan_in))
    return module.param(name, nn.with_logical_partitioning(init, axes), shape, _DTYPES[cfg.param_dtype])


def _tokens(x: Array, w: Array) -> Array:
    """`x [B, T, D_in] . w [D_in, ...]` -> `[B, T, ...]` as one `[B*T, D_in]` matmul.

    With the batch and length axes merged, the weight gradient contracts a single token axis;
    XLA:CPU runs a two-axis contraction through transposes and a slower kernel (figures:
    docs/results/2026-12-01-train-step-mfu.md).
    """
    b, t, d = x.shape
    return (x.reshape(b * t, d) @ w.reshape(d, -1)).reshape(b, t, *w.shape[1:])


class Attention(nn.Module):
    """Grouped-query attention with RoPE through `jax.nn.dot_product_attention`."""

    cfg: ModelConfig
    mesh: Optional[Mesh] = None
    prefill: bool = False

    @nn.compact
    def __call__(self, x, cos, sin, mask, cache_kv, write_index):
        cfg, dt = self.cfg, _DTYPES[self.cfg.dtype]
        d, n, k, h = cfg.hidden, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        wq = _dense(self, "q", (d, n, h), ("embed", "heads", "head_dim"), cfg, d)
        wk = _dense(self, "k", (d, k, h), ("embed", "kv_heads", "head_dim"), cfg, d)
        wv = _dense(self, "v", (d, k, h), ("embed", "kv_heads", "head_dim"), cfg, d)
        wo = _dense(self, "o", (n, h, d), ("heads", "head_dim", "embed"), cfg, n * h)
        b, t = x.shape[:2]
        q, key, val = (_tokens(x, w.astype(dt)) for w in (wq, wk, wv))
        if cfg.qkv_bias:
            zeros = nn.initializers.zeros
            pdt = _DTYPES[cfg.param_dtype]
            q = q + self.param("q_bias", nn.with_logical_partitioning(zeros, ("heads", "head_dim")), (n, h), pdt).astype(dt)
            key = key + self.param("k_bias", nn.with_logical_partitioning(zeros, ("kv_heads", "head_dim")), (k, h), pdt).astype(dt)
            val = val + self.param("v_bias", nn.with_logical_partitioning(zeros, ("kv_heads", "head_dim")), (k, h), pdt).astype(dt)
        sinks = None
        if cfg.attn_sinks:
            sinks = self.param("sinks", nn.with_logical_partitioning(nn.initializers.zeros, ("heads",)), (n,),
                               _DTYPES[cfg.param_dtype])
        if cfg.qk_norm:
            q = RMSNorm(cfg.rms_eps, _DTYPES[cfg.param_dtype], "head_dim", name="q_norm")(q)
            key = RMSNorm(cfg.rms_eps, _DTYPES[cfg.param_dtype], "head_dim", name="k_norm")(key)
        q, key = apply_rope(q, cos, sin), apply_rope(key, cos, sin)
        q = _constrain(q, ("batch", "length", "heads", "head_dim"), self.mesh)
        if cache_kv is not None:
            # Write the new tokens in place into the full [L, B, S, K, Dh] cache.
            cache_k, cache_v, layer_idx = cache_kv
            at = (layer_idx, 0, write_index, 0, 0)
            cache_k = jax.lax.dynamic_update_slice(cache_k, key[None].astype(cache_k.dtype), at)
            cache_v = jax.lax.dynamic_update_slice(cache_v, val[None].astype(cache_v.dtype), at)
            if not self.prefill:  # decode reads the layer's whole cache; prefill only its own keys
                key, val = cache_k[layer_idx].astype(dt), cache_v[layer_idx].astype(dt)
            cache_kv = (cache_k, cache_v, layer_idx)
        if sinks is not None:  # every path: `mask` is explicit [B, 1, T, S] here (`Decoder`)
            out = sink_attention(q, key, val, mask, sinks, 1.0 / math.sqrt(h))
        elif self.prefill:
            out = prefill_attention(q, key, val, mask, 1.0 / math.sqrt(h))
        elif cache_kv is None:
            out = causal_block_attention(q, key, val, mask, 1.0 / math.sqrt(h), fused=cfg.remat_policy != "full")
        else:
            out = jax.nn.dot_product_attention(q, key, val, mask=mask, scale=1.0 / math.sqrt(h))
        out = _constrain(out, ("batch", "length", "heads", "head_dim"), self.mesh)
        out = _tokens(out.reshape(b, t, n * h), wo.reshape(n * h, d).astype(dt))
        if cfg.o_bias:
            out = out + self.param("o_bias", nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)), (d,),
                                   _DTYPES[cfg.param_dtype]).astype(dt)
        return out, cache_kv


class MLP(nn.Module):
    """SwiGLU feed-forward: down(silu(gate(x)) * up(x))."""

    cfg: ModelConfig
    mesh: Optional[Mesh] = None

    @nn.compact
    def __call__(self, x):
        cfg, dt = self.cfg, _DTYPES[self.cfg.dtype]
        d, f = cfg.hidden, cfg.intermediate
        gate = _dense(self, "gate", (d, f), ("embed", "mlp"), cfg, d)
        up = _dense(self, "up", (d, f), ("embed", "mlp"), cfg, d)
        down = _dense(self, "down", (f, d), ("mlp", "embed"), cfg, f)
        hid = jax.nn.silu(_tokens(x, gate.astype(dt))) * _tokens(x, up.astype(dt))
        hid = _constrain(hid, ("batch", "length", "mlp"), self.mesh)
        return _tokens(hid, down.astype(dt))


class Layer(nn.Module):
    """One pre-norm decoder layer; the scan body. Carry: (x, cache_k, cache_v)."""

    cfg: ModelConfig
    mesh: Optional[Mesh] = None
    prefill: bool = False

    @nn.compact
    def __call__(self, carry, layer_idx, cos, sin, mask, write_index):
        x, cache_k, cache_v = carry
        pdt = _DTYPES[self.cfg.param_dtype]
        if isinstance(mask, tuple):  # (full, sliding-window) masks: the layer's kind picks one
            full, window = mask
            mask = jnp.where(jnp.asarray(self.cfg.sliding_layers)[layer_idx], window, full)
        layer_kv = None if cache_k is None else (cache_k, cache_v, layer_idx)
        h, layer_kv = Attention(self.cfg, self.mesh, self.prefill, name="attn")(
            RMSNorm(self.cfg.rms_eps, pdt, name="attn_norm")(x), cos, sin, mask, layer_kv, write_index)
        x = x + h
        y = RMSNorm(self.cfg.rms_eps, pdt, name="mlp_norm")(x)
        if self.cfg.is_moe:
            y, router_logits, chosen = MoE(self.cfg, pdt, name="mlp")(y)
            self.sow("intermediates", "router", (router_logits, chosen))
            x = x + y
        else:
            x = x + MLP(self.cfg, self.mesh, name="mlp")(y)
        x = _constrain(x, ("batch", "length", "embed"), self.mesh)
        if cache_k is not None:
            cache_k, cache_v, _ = layer_kv
        return (x, cache_k, cache_v), None


class Decoder(nn.Module):
    """Embedding, scanned layers, final norm and (tied or untied) LM head.

    `prefill`: the call fills a fresh cache from slot 0 (`cache.index == 0`), so each query
    attends only to this call's own keys (`[T]`, not the cache capacity `[S]`), in query
    blocks of `PREFILL_QUERY_BLOCK` (`prefill_attention`).
    """

    cfg: ModelConfig
    mesh: Optional[Mesh] = None
    prefill: bool = False

    @nn.compact
    def __call__(self, tokens, positions, cache: Optional[KVCache] = None,
                 segment_ids=None, logits_index=None, return_hidden: bool = False):
        cfg, dt, pdt = self.cfg, _DTYPES[self.cfg.dtype], _DTYPES[self.cfg.param_dtype]
        embed = self.param("embed", nn.with_logical_partitioning(
            nn.initializers.normal(stddev=1.0 / math.sqrt(cfg.hidden)), ("vocab", "embed")), (cfg.vocab_size, cfg.hidden), pdt)
        # The lookup reads a replicated view of the table (one all-gather under a mesh).
        x = jnp.take(_constrain(embed, (None, None), self.mesh), tokens, axis=0).astype(dt)  # [B, T, D]
        x = _constrain(x, ("batch", "length", "embed"), self.mesh)

        cos, sin = rope_tables(cfg, positions)  # [B, T, Dh/2]

        t = tokens.shape[1]
        if cache is None:
            q_idx = jnp.arange(t)[None, :, None]
            mask = jnp.broadcast_to(jnp.arange(t)[None, None, :] <= q_idx, (tokens.shape[0], t, t))
            if segment_ids is not None:
                mask = mask & (segment_ids[:, :, None] == segment_ids[:, None, :])
            write_index, cache_k, cache_v = None, None, None
        else:
            write_index, cache_k, cache_v = cache.index, cache.k, cache.v
            if self.prefill and cfg.attn_sinks:  # sink attention takes an explicit mask
                keys = jnp.arange(t)[None, None, :]
                mask = (keys <= jnp.arange(t)[None, :, None]) & (keys >= cache.start[:, None, None])
            elif self.prefill:  # built per query block inside prefill_attention
                mask = cache.start
            else:
                slots = jnp.arange(cache.capacity)[None, None, :]
                q_slot = cache.index + jnp.arange(t)[None, :, None]  # [1, T, 1]
                mask = (slots <= q_slot) & (slots >= cache.start[:, None, None])  # [B, T, S]
        if not self.prefill or cfg.attn_sinks:
            mask = mask[:, None, :, :]
        if cfg.sliding_window is not None:  # key slot j is seen from query slot i when i - j < window
            q_slot = jnp.arange(t) + (0 if cache is None or self.prefill else cache.index)
            k_slot = jnp.arange(mask.shape[-1])
            mask = (mask, mask & (q_slot[:, None] - k_slot[None, :] < cfg.sliding_window))

        layer_cls = Layer
        # remat only where a backward can follow: not at init, not in cached (sampling) calls
        if cfg.remat_policy != "none" and cache is None and not self.is_initializing():
            layer_cls = nn.remat(Layer, prevent_cse=False, policy=REMAT_POLICY[cfg.remat_policy])
        stack = nn.scan(layer_cls, variable_axes={"params": 0, "intermediates": 0}, split_rngs={"params": True},
                        in_axes=(0, nn.broadcast, nn.broadcast, nn.broadcast, nn.broadcast),
                        length=cfg.num_layers, metadata_params={nn.PARTITION_NAME: "layers"},
                        unroll=cfg.scan_unroll)
        (x, cache_k, cache_v), _ = stack(cfg, self.mesh, self.prefill, name="layers")(
            (x, cache_k, cache_v), jnp.arange(cfg.num_layers), cos, sin, mask, write_index)

        if logits_index is not None:  # only the rows' chosen positions: [B, 1, D]
            x = jnp.take_along_axis(x, logits_index[:, None, None], axis=1)
        x = RMSNorm(cfg.rms_eps, pdt, name="final_norm")(x)
        if return_hidden:  # the head is left to the caller (e.g. a chunked cross-entropy)
            new_cache = None if cache is None else KVCache(cache_k, cache_v, cache.start, cache.index + t)
            return x, new_cache
        if cfg.tie_embeddings:
            head = embed.T
        else:
            head = self.param("lm_head", nn.with_logical_partitioning(
                nn.initializers.normal(stddev=1.0 / math.sqrt(cfg.hidden)), ("embed", "vocab")),
                (cfg.hidden, cfg.vocab_size), pdt)
        logits = jnp.einsum("btd,dv->btv", x, head.astype(dt), preferred_element_type=jnp.float32)
        logits = _constrain(logits, ("batch", "length", "vocab"), self.mesh)
        new_cache = None
        if cache is not None:
            new_cache = KVCache(cache_k, cache_v, cache.start, cache.index + t)
        return logits, new_cache


def forward(cfg: ModelConfig, params, tokens: Array, positions: Array,
            cache: Optional[KVCache] = None, *, segment_ids: Optional[Array] = None,
            logits_index: Optional[Array] = None, mesh: Optional[Mesh] = None, prefill: bool = False,
            return_hidden: bool = False):
    """Pure forward pass: `(params, tokens [B,T], positions [B,T], cache) -> (logits, cache)`.

    `return_hidden`: return the final-normed hidden states `[B, T, D]` instead of logits
    (`prd_jax.train.chunked_xent` applies the head in token chunks).

    Logits are fp32 `[B, T, V]` (or `[B, 1, V]` at `logits_index [B]`). Without a cache the
    mask is causal (and block-diagonal by `segment_ids` for packed rows). `prefill=True`
    requires a cache whose `index` is 0 (see `Decoder`).
    """
    if prefill and cache is None:
        raise ValueError("forward(prefill=True) needs a fresh cache to fill")
    return Decoder(cfg, mesh, prefill).apply({"params": params}, tokens, positions, cache,
                                             segment_ids, logits_index, return_hidden)


def forward_with_router_loss(cfg: ModelConfig, params, tokens: Array, positions: Array, *,
                             segment_ids: Optional[Array] = None, token_mask: Optional[Array] = None,
                             mesh: Optional[Mesh] = None, return_hidden: bool = False):
    """`forward` without a cache, plus the mixture-of-experts load-balancing loss:
    `(logits or hidden, (aux_sum, aux_count))`.

    The loss is `moe.load_balancing_loss` of each layer's router (over the tokens where
    `token_mask [B, T]` is true, default all) averaged over the layers; `aux_sum / aux_count`
    is that mean, and (sum, count) add up over micro-batches. A train step adds
    `cfg.router_aux_loss_coef * aux_sum / aux_count` to its loss (0 by default: off).
    """
    if not cfg.is_moe:
        raise ValueError(f"forward_with_router_loss: model family {cfg.family!r} has no experts "
                         "(num_experts=0); allowed: a mixture-of-experts config (gpt_oss)")
    (out, _), state = Decoder(cfg, mesh).apply({"params": params}, tokens, positions, None, segment_ids, None,
                                               return_hidden, mutable=["intermediates"])
    (logits, chosen), = state["intermediates"]["layers"]["router"]  # [L, B*T, E], [L, B*T, k]
    mask = None if token_mask is None else token_mask.reshape(-1)
    sums, counts = jax.vmap(lambda lg, ch: load_balancing_loss(lg, ch, cfg.num_experts, mask))(logits, chosen)
    return out, (jnp.mean(sums), counts[0])


PREFILL_QUERY_BLOCK = 1024


def prefill_attention(q: Array, key: Array, val: Array, start: Array, scale: float,
                      block: int = PREFILL_QUERY_BLOCK) -> Array:
    """Causal attention of a left-padded prompt over its own keys, in query blocks.

    q `[B, T, N, Dh]`, key/val `[B, T, K, Dh]`, `start [B]`: row b's first real token. Query t
    sees keys `start[b] <= j <= t`. Scores are `[B, N, block, T]` per block (a `lax.map`), so
    prefill memory grows with T * block, not T * T, nor with the generation slots.
    """
    t = q.shape[1]
    keys = jnp.arange(t)[None, None, :]

    def one(q_blk, first):
        q_idx = first + jnp.arange(q_blk.shape[1])[None, :, None]
        mask = (keys <= q_idx) & (keys >= start[:, None, None])  # [B, block, T]
        return jax.nn.dot_product_attention(q_blk, key, val, mask=mask[:, None], scale=scale)

    if t <= block:
        return one(q, 0)
    b, _, n, dh = q.shape
    nb = -(-t // block)  # the last block is padded with queries past the prompt (sliced off)
    q = jnp.pad(q, ((0, 0), (0, nb * block - t), (0, 0), (0, 0)))
    blocks = q.reshape(b, nb, block, n, dh).swapaxes(0, 1)  # [T/block, B, block, N, Dh]
    out = jax.lax.map(lambda xs: one(*xs), (blocks, jnp.arange(0, nb * block, block)))
    return out.swapaxes(0, 1).reshape(b, nb * block, n, dh)[:, :t]


def abstract_params(cfg: ModelConfig):
    """Shapes/dtypes of the params, boxed with their logical axis names (no allocation)."""
    tokens = jnp.zeros((1, 1), jnp.int32)
    return jax.eval_shape(lambda: Decoder(cfg).init(jax.random.key(0), tokens, tokens)["params"])


def param_logical_axes(cfg: ModelConfig):
    """Pytree of logical-axis-name tuples, one per parameter."""
    boxed = abstract_params(cfg)
    return jax.tree.map(lambda b: tuple(b.names), boxed, is_leaf=lambda x: isinstance(x, nn.Partitioned))


def param_shapes(cfg: ModelConfig):
    """Pytree of `jax.ShapeDtypeStruct`, one per parameter."""
    return nn.meta.unbox(abstract_params(cfg))


def init_params(cfg: ModelConfig, key: Array):
    """Random params (unboxed), for tests and training from scratch."""
    tokens = jnp.zeros((1, 1), jnp.int32)
    return nn.meta.unbox(Decoder(cfg).init(key, tokens, tokens)["params"])


# ---------------------------------------------------------------------------------------
# Unrolled-layers decode (the sampler's while-loop body).
#
# Inside a decode loop, the scanned stack above dynamic-slices every layer's weights and
# KV cache out of the stacked arrays on every step, and transposes the layer's cache for
# attention. `decode_weights` instead slices the stacked params into per-layer arrays once
# per generate call (outside the loop), fusing q/k/v and gate/up into one matmul each;
# `decode_cache` splits the cache into per-layer keys `[B, K, Dh, S]` and values
# `[B, K, S, Dh]`, so each step writes one slot of each in place and the scores run along
# contiguous slots. The param tree is unchanged: these are derived views, built inside the
# sampling program.
# ---------------------------------------------------------------------------------------


def can_fuse(mesh: Optional[Mesh]) -> bool:
    """Fused q/k/v and gate/up weights only where the heads/mlp axes are not split over
    `tensor` (concatenating tensor-sharded blocks would interleave the shards)."""
    return mesh is None or mesh.shape.get("tensor", 1) == 1


def decode_weights(cfg: ModelConfig, params, mesh: Optional[Mesh] = None, fuse: Optional[bool] = None):
    """Per-layer decode weights from the stacked params, cast to the compute dtype.

    Returns `{"layers": (layer_0, ..., layer_{L-1}), "embed", "final_norm", "head"}`. Every
    matrix is stored output-major, `[out, in]`, and applied by `_apply` (contracting its last
    axis). Which form XLA:CPU runs faster depends on the host (docs/results/2026-12-01-decode-profile.md);
    one fixed layout keeps programs and rounding host-independent. The tied head
    is the embedding table itself (`[V, D]`, no copy). A layer has `attn_norm`, `mlp_norm`,
    `o` `[D, N*Dh]`, `down` `[D, F]` and either fused `qkv` `[(N+2K)*Dh, D]` and `gate_up`
    `[2F, D]`, or separate `q`/`k`/`v`/`gate`/`up`.
    """
    dt = _DTYPES[cfg.dtype]
    fuse = can_fuse(mesh) if fuse is None else fuse
    d, n, k, h = cfg.hidden, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    stack = params["layers"]
    attn, mlp = stack["attn"], stack["mlp"]
    layers = []
    t = lambda w: w.T.astype(dt)  # [in, out] -> [out, in]
    for i in range(cfg.num_layers):
        q, kk, v = attn["q"][i].reshape(d, n * h), attn["k"][i].reshape(d, k * h), attn["v"][i].reshape(d, k * h)
        layer = {"attn_norm": stack["attn_norm"]["scale"][i], "mlp_norm": stack["mlp_norm"]["scale"][i],
                 "o": t(attn["o"][i].reshape(n * h, d))}
        if cfg.is_moe:  # the experts keep their stacked layout (`moe.moe_tokens`)
            layer["moe"] = {name: w[i] for name, w in mlp.items()}
        else:
            layer["down"] = t(mlp["down"][i])
        if fuse:
            layer["qkv"] = t(jnp.concatenate([q, kk, v], axis=1))
            if not cfg.is_moe:
                layer["gate_up"] = t(jnp.concatenate([mlp["gate"][i], mlp["up"][i]], axis=1))
        else:
            layer.update(q=t(q), k=t(kk), v=t(v))
            if not cfg.is_moe:
                layer.update(gate=t(mlp["gate"][i]), up=t(mlp["up"][i]))
        if cfg.o_bias:
            layer["o_bias"] = attn["o_bias"][i].astype(dt)
        if cfg.attn_sinks:
            layer["sinks"] = attn["sinks"][i]
        if cfg.qkv_bias:
            layer["qkv_bias"] = jnp.concatenate([attn["q_bias"][i].reshape(-1), attn["k_bias"][i].reshape(-1),
                                                 attn["v_bias"][i].reshape(-1)]).astype(dt)
        if cfg.qk_norm:
            layer["q_norm"], layer["k_norm"] = attn["q_norm"]["scale"][i], attn["k_norm"]["scale"][i]
        layers.append(layer)
    embed = params["embed"]
    out = {"layers": tuple(layers), "embed": embed, "final_norm": params["final_norm"]["scale"]}
    out["head"] = embed.astype(dt) if cfg.tie_embeddings else t(params["lm_head"])
    return out


def _apply(x: Array, w: Array, out_dtype=None) -> Array:
    """`x [..., in] . w [out, in]` -> `[..., out]` (the decode weights' output-major form)."""
    return jnp.einsum("...i,oi->...o", x, w, preferred_element_type=out_dtype)


DECODE_CACHE_AXES = (("batch", "kv_heads", "head_dim", "cache_length"),  # keys
                     ("batch", "kv_heads", "cache_length", "head_dim"))  # values


def ring_windows(cfg: ModelConfig) -> Optional[tuple]:
    """Per-layer ring sizes of the decode caches: the window on sliding-window layers, None on
    full-attention ones; None when no layer slides (`decode_cache`)."""
    if cfg.sliding_window is None:
        return None
    return tuple(cfg.layer_window(i) for i in range(cfg.num_layers))


def decode_cache(cache: KVCache, mesh: Optional[Mesh] = None, slots: int = 0,
                 windows: Optional[tuple] = None) -> tuple:
    """Stacked cache `[L, B, S, K, Dh]` -> per-layer `((k_0, v_0), ...)`: keys `[B, K, Dh, S']`
    (transposed, so the scores contract Dh with S contiguous; timings in
    docs/results/2026-12-01-decode-profile.md), values `[B, K, S', Dh]`.

    With `slots > S` the slot axis is zero-padded to `S' = slots` in the same pass: the
    sampler prefills a prompt-sized cache and adds the generation slots here, so the
    full-capacity cache is written once instead of being built, merged and transposed.

    `windows` (`ring_windows(cfg)`): a layer with window W keeps a ring of `R = min(S', W)`
    slots: absolute slot a lives at ring slot `a % R` (`decode_step_groups` writes and masks
    accordingly), so a sliding-window layer's cache never exceeds its window.
    """
    caches = tuple((jnp.transpose(cache.k[i], (0, 2, 3, 1)), jnp.swapaxes(cache.v[i], 1, 2))
                   for i in range(cache.k.shape[0]))
    if windows is not None:
        caches = tuple(kv if w is None else _to_ring(kv, min(max(slots, kv[1].shape[2]), w))
                       for kv, w in zip(caches, windows))
    return grow_decode_cache(caches, slots, mesh, windows)


def _to_ring(kv: tuple, ring: int) -> tuple:
    """A layer's prompt cache of P slots as a ring of `ring` slots (the latest `ring` absolute
    slots, slot a at `a % ring`); unchanged when P <= ring (padding then makes the ring)."""
    k, v = kv
    p = v.shape[2]
    if p <= ring:
        return kv
    absolute = (p - 1) - np.mod(p - 1 - np.arange(ring), ring)  # ring slot j holds absolute slot a = j mod ring
    return jnp.take(k, absolute, axis=3), jnp.take(v, absolute, axis=2)


def grow_decode_cache(caches: tuple, slots: int, mesh: Optional[Mesh] = None,
                      windows: Optional[tuple] = None) -> tuple:
    """Per-layer decode caches (`decode_cache` layout) with the slot axis zero-padded to
    `slots` (unchanged when they already hold that many); a ring layer (`windows`) grows to at
    most its window. Zero slots past the write index are masked, so a step's logits do not
    depend on the padding (tested). A ring of R < W slots only ever held absolute slots < R,
    each at its own index, so padding it keeps it a valid ring."""
    k_axes, v_axes = DECODE_CACHE_AXES
    windows = windows or (None,) * len(caches)

    def grow(x, axis, w):
        extra = max(0, (slots if w is None else min(slots, w)) - x.shape[axis])
        return x if not extra else jnp.pad(x, [(0, extra) if a == axis else (0, 0) for a in range(x.ndim)])

    return tuple((_constrain(grow(k, 3, w), k_axes, mesh), _constrain(grow(v, 2, w), v_axes, mesh))
                 for (k, v), w in zip(caches, windows))


def cache_attention(q: Array, cache_k: Array, cache_v: Array, mask: Array, scale: float,
                    sinks: Optional[Array] = None) -> Array:
    """One query token per row over its cache (the decode step's attention), in fp32.

    q `[B, K, G, Dh]` (G query heads per kv head), keys `[B, K, Dh, S]`, values `[B, K, S, Dh]`
    (`decode_cache` layout), `mask [B, S]` -> `[B, K, G, Dh]`. Written as broadcast products
    reduced over Dh and then over S rather than as batched dots: with G = 3 query rows per kv
    head the dots are B * K tiny matmuls, while XLA:CPU fuses the multiply-reduce into one
    streaming pass over the cache (`benchmarks/decode_floor.py`; figures in
    docs/results/2026-12-01-decode-profile.md).
    `sinks [K*G]`: each head's sink logit joins the softmax denominator (`prd_jax.model.sinks`).
    """
    f32 = jnp.float32
    scores = (q.astype(f32)[..., None] * cache_k.astype(f32)[:, :, None]).sum(axis=3) * scale  # [B, K, G, S]
    scores = jnp.where(mask[:, None, None, :], scores, jnp.finfo(f32).min)
    if sinks is not None:
        sink = jnp.broadcast_to(sinks.astype(f32).reshape(1, *scores.shape[1:3], 1), (*scores.shape[:3], 1))
        probs = jax.nn.softmax(jnp.concatenate([scores, sink], axis=-1), axis=-1)[..., :-1]
    else:
        probs = jax.nn.softmax(scores, axis=-1)
    return (probs[..., None] * cache_v.astype(f32)[:, :, None]).sum(axis=3)


def _rms(x: Array, scale: Array, eps: float) -> Array:
    x32 = x.astype(jnp.float32)
    y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return (y * scale.astype(jnp.float32)).astype(x.dtype)


def _rope_1(x: Array, cos: Array, sin: Array) -> Array:
    """`apply_rope` for one token per row: x `[B, N, Dh]`, cos/sin `[B, Dh/2]`."""
    return apply_rope(x[:, None], cos[:, None], sin[:, None])[:, 0]


def decode_step(cfg: ModelConfig, weights, tokens: Array, positions: Array, caches: tuple,
                start: Array, index: Array, *, mesh: Optional[Mesh] = None):
    """One token per row through the unrolled layers: `tokens [B]` at `positions [B]`.

    Writes the token's keys/values at slot `index` of each layer's cache (`decode_cache`
    layout) and attends to slots `start[b] <= j <= index`. Returns fp32 logits `[B, V]` and
    the updated caches; equals `forward` with a one-token step (tested against it).
    """
    logits, (caches,) = decode_step_groups(cfg, weights, tokens, positions, ((caches, start, index),), mesh=mesh)
    return logits, caches


def decode_step_groups(cfg: ModelConfig, weights, tokens: Array, positions: Array, groups: tuple, *,
                       mesh: Optional[Mesh] = None):
    """`decode_step` over rows cut into contiguous groups, each with its own caches.

    `groups` is `((caches, start, index), ...)` in row order; group g's caches hold its rows
    (their count is the caches' batch size) with its own slot count and write slot `index`,
    `start` its rows' first slots. `index` is one slot for the group (a scalar: the sampler's
    rows advance together) or one per row (`[B_g]`: the serving engine's slots, each row at its
    own point, `prd_jax.serve.slots`). The projections, MLP and head run once over all rows; only
    the attention runs per group, over that group's slots: rows with short prompts then
    read a cache of their own prompt width (`sampling.SamplingConfig.prompt_groups`).
    Returns fp32 logits `[B, V]` and each group's updated caches.
    """
    dt = _DTYPES[cfg.dtype]
    n, k, h = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    g = n // k
    b = tokens.shape[0]
    x = jnp.take(_constrain(weights["embed"], (None, None), mesh), tokens, axis=0).astype(dt)  # [B, D]
    x = _constrain(x, ("batch", "embed"), mesh)
    cos, sin = rope_tables(cfg, positions)  # [B, Dh/2]
    bounds, masks = [0], {}
    for caches, start, index in groups:
        bounds.append(bounds[-1] + caches[0][1].shape[0])

    def mask_of(j: int, size: int, window: Optional[int]) -> Array:
        """Group j's visible slots `[B_g, size]`: a full cache sees `start <= slot <= index`; a
        sliding layer's cache is a ring (`decode_cache`), slot s holding absolute slot
        `index - (index - s) mod size`, seen when it is >= start and within the window."""
        if (j, size, window) not in masks:
            _, start, index = groups[j]
            index = index[:, None] if jnp.ndim(index) else index
            slots = jnp.arange(size)[None, :]
            if window is None:
                masks[j, size, window] = (slots <= index) & (slots >= start[:, None])
            else:
                absolute = index - jnp.mod(index - slots, size)
                masks[j, size, window] = (absolute >= start[:, None]) & (index - absolute < window)
        return masks[j, size, window]
    scale = 1.0 / math.sqrt(h)
    new_caches = [[] for _ in groups]
    for i, layer in enumerate(weights["layers"]):
        y = _rms(x, layer["attn_norm"], cfg.rms_eps)
        if "qkv" in layer:
            qkv = _apply(y, layer["qkv"])
            if "qkv_bias" in layer:
                qkv = qkv + layer["qkv_bias"]
            q, key, val = jnp.split(qkv, [n * h, (n + k) * h], axis=-1)
        else:
            q, key, val = _apply(y, layer["q"]), _apply(y, layer["k"]), _apply(y, layer["v"])
            if "qkv_bias" in layer:
                bq, bk, bv = jnp.split(layer["qkv_bias"], [n * h, (n + k) * h])
                q, key, val = q + bq, key + bk, val + bv
        q, key, val = q.reshape(b, n, h), key.reshape(b, k, h), val.reshape(b, k, h)
        if "q_norm" in layer:
            q, key = _rms(q, layer["q_norm"], cfg.rms_eps), _rms(key, layer["k_norm"], cfg.rms_eps)
        q, key = _rope_1(q, cos, sin), _rope_1(key, cos, sin)
        q = q.reshape(b, k, g, h)  # head n = kv_head * G + g (grouped-query attention)
        outs = []
        for j, (caches, _, index) in enumerate(groups):
            rows = slice(bounds[j], bounds[j + 1])
            cache_k, cache_v = caches[i]
            size, window = cache_v.shape[2], cfg.layer_window(i)
            slot = index if window is None else jnp.mod(index, size)  # a sliding layer's ring slot
            if jnp.ndim(slot):  # one write slot per row
                own = jnp.arange(cache_v.shape[0])
                cache_k = cache_k.at[own, :, :, slot].set(key[rows].astype(cache_k.dtype), unique_indices=True)
                cache_v = cache_v.at[own, :, slot].set(val[rows].astype(cache_v.dtype), unique_indices=True)
            else:
                cache_k = jax.lax.dynamic_update_slice(cache_k, key[rows, :, :, None].astype(cache_k.dtype),
                                                       (0, 0, 0, slot))
                cache_v = jax.lax.dynamic_update_slice(cache_v, val[rows, :, None].astype(cache_v.dtype),
                                                       (0, 0, slot, 0))
            new_caches[j].append((cache_k, cache_v))
            outs.append(cache_attention(q[rows], cache_k, cache_v, mask_of(j, size, window), scale,
                                        layer.get("sinks")))
        out = (outs[0] if len(outs) == 1 else jnp.concatenate(outs, axis=0)).astype(dt).reshape(b, n * h)
        x = x + _apply(out, layer["o"])
        if "o_bias" in layer:
            x = x + layer["o_bias"]
        y = _rms(x, layer["mlp_norm"], cfg.rms_eps)
        if "moe" in layer:
            y, _, _ = moe_tokens(y, layer["moe"], cfg.experts_per_token, cfg.swiglu_limit, cfg.swiglu_alpha,
                                 cfg.moe_dispatch)
            x = _constrain(x + y, ("batch", "embed"), mesh)
            continue
        if "gate_up" in layer:
            gate, up = jnp.split(_apply(y, layer["gate_up"]), 2, axis=-1)
        else:
            gate, up = _apply(y, layer["gate"]), _apply(y, layer["up"])
        hid = _constrain(jax.nn.silu(gate) * up, ("batch", "mlp"), mesh)
        x = _constrain(x + _apply(hid, layer["down"]), ("batch", "embed"), mesh)
    x = _rms(x, weights["final_norm"], cfg.rms_eps)
    logits = _apply(x, weights["head"], jnp.float32)
    return _constrain(logits, ("batch", "vocab"), mesh), tuple(tuple(c) for c in new_caches)
