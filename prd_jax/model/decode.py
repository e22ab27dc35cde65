"""The caches and the decode step: the stacked cache the forward fills, the per-layer decode
layout, and one token per row through the unrolled layers (the sampler's while-loop body).

Stacked cache (`KVCache`, left-padded rows): per-layer keys/values `[L, B, S, K, Dh]`; all
rows share one write slot `cache.index`; row b's valid keys start at slot `cache.start[b]`
(its left padding ends there). A `decoder.forward` call with T new tokens writes them at slots
`index .. index+T-1` with one in-place `dynamic_update_slice`, and query t of row b attends
to slots `start[b] <= j <= index + t`. Positions are passed explicitly (for row b, slot minus
`start[b]`), so a ragged batch gives each row the result it would get alone. The returned
cache has `index + T`.

Decode layout: inside a decode loop, the scanned stack dynamic-slices every layer's weights
and KV cache out of the stacked arrays on every step, and transposes the layer's cache for
attention. `decode_weights` instead slices the stacked params into per-layer arrays once per
generate call (outside the loop), fusing q/k/v and gate/up into one matmul each;
`decode_cache` splits the cache into per-layer keys `[B, K, Dh, S]` and values
`[B, K, S, Dh]`, so each step writes one slot of each in place and the scores run along
contiguous slots. The param tree is unchanged: these are derived views, built inside the
sampling program. Each layer still runs `layers.decoder_layer`, with output-major weights
(`_apply`) and the per-group cache attention (`attention.cache_attention`) as its `attend`.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import flax
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from prd_jax.model.attention import cache_attention, decode_form
from prd_jax.model.config import ModelConfig
from prd_jax.model.layers import constrain, decoder_layer, embed_tokens_local, rms_norm, rope_tables

Array = jax.Array


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
    dtype = dtype or jnp.dtype(cfg.dtype)
    shape = (cfg.num_layers, batch, capacity, cfg.num_kv_heads, cfg.head_dim)
    return KVCache(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype), jnp.zeros((batch,), jnp.int32),
                   jnp.zeros((), jnp.int32))


CACHE_AXES = ("layers", "batch", "cache_length", "kv_heads", "head_dim")


def can_fuse(mesh: Optional[Mesh]) -> bool:
    """Fused q/k/v and gate/up weights only where the heads/mlp axes are not split over
    `tensor` (concatenating tensor-sharded blocks would interleave the shards)."""
    return mesh is None or mesh.shape.get("tensor", 1) == 1


def decode_weights(cfg: ModelConfig, params, mesh: Optional[Mesh] = None, fuse: Optional[bool] = None):
    """Per-layer decode weights from the stacked params, cast to the compute dtype.

    Returns `{"layers": (layer_0, ..., layer_{L-1}), "embed", "final_norm", "head"}`, each layer
    a `layers.decoder_layer` weight dict. Every matrix is stored output-major, `[out, in]`, and
    applied by `_apply` (contracting its last axis). Which form XLA:CPU runs faster depends on
    the host (docs/results/2026-12-01-decode-profile.md); one fixed layout keeps programs and
    rounding host-independent. The tied head is the embedding table itself (`[V, D]`, no copy).
    A layer has `attn_norm`, `mlp_norm`, `o` `[D, N*Dh]`, `down` `[D, F]` and either fused `qkv`
    `[(N+2K)*Dh, D]` and `gate_up` `[2F, D]`, or separate `q`/`k`/`v`/`gate`/`up`; the family's
    biases, sinks and q/k norms keep their param shapes (a mixture of experts keeps its params
    under `moe`).
    """
    dt = jnp.dtype(cfg.dtype)
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
            layer.update({name: attn[name][i].astype(dt) for name in ("q_bias", "k_bias", "v_bias")})
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
                 windows: Optional[tuple] = None, dtype: Any = None) -> tuple:
    """Stacked cache `[L, B, S, K, Dh]` -> per-layer `((k_0, v_0), ...)`: keys `[B, K, Dh, S']`
    (transposed, so the scores contract Dh with S contiguous; timings in
    docs/results/2026-12-01-decode-profile.md), values `[B, K, S', Dh]`.

    With `slots > S` the slot axis is zero-padded to `S' = slots` in the same pass: the
    sampler prefills a prompt-sized cache and adds the generation slots here, so the
    full-capacity cache is written once instead of being built, merged and transposed.

    `windows` (`ring_windows(cfg)`): a layer with window W keeps a ring of `R = min(S', W)`
    slots: absolute slot a lives at ring slot `a % R` (`decode_step_groups` writes and masks
    accordingly), so a sliding-window layer's cache never exceeds its window.

    `dtype` (`SamplingConfig.kv_cache_dtype`; None = the stacked cache's): the per-layer caches'
    dtype; every later write is rounded to it (`decode_step_groups`).
    """
    cast = (lambda x: x) if dtype is None else (lambda x: kv_store(x, dtype))
    caches = tuple((cast(jnp.transpose(cache.k[i], (0, 2, 3, 1))), cast(jnp.swapaxes(cache.v[i], 1, 2)))
                   for i in range(cache.k.shape[0]))
    if windows is not None:
        caches = tuple(kv if w is None else _to_ring(kv, min(max(slots, kv[1].shape[2]), w))
                       for kv, w in zip(caches, windows))
    return grow_decode_cache(caches, slots, mesh, windows)


def kv_store(x: Array, dtype) -> Array:
    """`x` rounded to the cache's `dtype`; a float8 cache saturates at its largest finite value
    (float8_e4m3fn has no infinity: an overflowing key would otherwise become NaN)."""
    dtype = jnp.dtype(dtype)
    if x.dtype == dtype:
        return x
    if jnp.issubdtype(dtype, jnp.floating) and jnp.finfo(dtype).bits == 8:
        top = float(jnp.finfo(dtype).max)
        x = jnp.clip(x, -top, top)
    return x.astype(dtype)


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

    return tuple((constrain(grow(k, 3, w), k_axes, mesh), constrain(grow(v, 2, w), v_axes, mesh))
                 for (k, v), w in zip(caches, windows))


def decode_step(cfg: ModelConfig, weights, tokens: Array, positions: Array, caches: tuple,
                start: Array, index: Array, *, mesh: Optional[Mesh] = None):
    """One token per row through the unrolled layers: `tokens [B]` at `positions [B]`.

    Writes the token's keys/values at slot `index` of each layer's cache (`decode_cache`
    layout) and attends to slots `start[b] <= j <= index`. Returns fp32 logits `[B, V]` and
    the updated caches; equals `decoder.forward` with a one-token step (tested against it).
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
    dt = jnp.dtype(cfg.dtype)
    n, k, h = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    g = n // k
    b = tokens.shape[0]
    x = embed_tokens_local(weights["embed"], tokens, dt, mesh, ("batch",))  # [B, D]
    form = decode_form(mesh)
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
        def attend(q, key, val, sinks, i=i):
            """Write each group's key/value slot of layer i, attend over the group's cache."""
            q = q.reshape(b, k, g, h)  # head n = kv_head * G + g (grouped-query attention)
            outs, layer_caches = [], []
            for j, (caches, _, index) in enumerate(groups):
                rows = slice(bounds[j], bounds[j + 1])
                cache_k, cache_v = caches[i]
                size, window = cache_v.shape[2], cfg.layer_window(i)
                slot = index if window is None else jnp.mod(index, size)  # a sliding layer's ring slot
                if jnp.ndim(slot):  # one write slot per row
                    own = jnp.arange(cache_v.shape[0])
                    cache_k = cache_k.at[own, :, :, slot].set(kv_store(key[rows], cache_k.dtype), unique_indices=True)
                    cache_v = cache_v.at[own, :, slot].set(kv_store(val[rows], cache_v.dtype), unique_indices=True)
                else:
                    cache_k = jax.lax.dynamic_update_slice(cache_k, kv_store(key[rows, :, :, None], cache_k.dtype),
                                                           (0, 0, 0, slot))
                    cache_v = jax.lax.dynamic_update_slice(cache_v, kv_store(val[rows, :, None], cache_v.dtype),
                                                           (0, 0, slot, 0))
                layer_caches.append((cache_k, cache_v))
                outs.append(cache_attention(q[rows], cache_k, cache_v, mask_of(j, size, window), scale, sinks,
                                            form))
            return (outs[0] if len(outs) == 1 else jnp.concatenate(outs, axis=0)).astype(dt), layer_caches

        x, layer_caches, _ = decoder_layer(cfg, layer, x, cos, sin, attend, _apply, mesh, ("batch",))
        for j, kv in enumerate(layer_caches):
            new_caches[j].append(kv)
    x = rms_norm(x, weights["final_norm"], cfg.rms_eps)
    logits = _apply(x, weights["head"], jnp.float32)
    return constrain(logits, ("batch", "vocab"), mesh), tuple(tuple(c) for c in new_caches)
