"""Decoder-only transformer (Flax Linen) for the Llama-3 / SmolLM2, Qwen2.5 and Qwen3 families.

`forward(cfg, params, tokens, positions, cache)` is the pure entry point: it returns
`(logits, new_cache)`. Layers are stacked and run with `nn.scan` (docs/design.md,
"Model"); the KV cache is `[L, B, S, K, Dh]` and travels in the
scan carry so each step writes one token in place instead of copying the cache.

The layer math lives in `prd_jax.model.layers` (`decoder_layer`), which both the scanned
`Layer` and the unrolled decode step (`decode_step_groups`, below) call; this module holds
the param declarations, the masks and caches, and the two attention cores.

Cache semantics (left-padded rows): all rows share one write slot `cache.index`; row b's
valid keys start at slot `cache.start[b]` (its left padding ends there). A call with T new
tokens writes them at slots `index .. index+T-1` with one in-place `dynamic_update_slice`,
and query t of row b attends to slots `start[b] <= j <= index + t`. Positions are passed
explicitly (for row b, slot minus `start[b]`), so a ragged batch gives each row the result
it would get alone. The returned cache has `index + T`.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Optional

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from prd_jax.model.attention import SAVED_NAMES, causal_block_attention
from prd_jax.model.config import ModelConfig
from prd_jax.model.layers import (apply_rope, constrain as _constrain, decoder_layer, embed_tokens, rms_norm,  # noqa: F401
                                  rope_inv_freq, rope_tables)
from prd_jax.model.moe import MoEParams, load_balancing_loss
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


class RMSNorm(nn.Module):
    """RMSNorm with a learned scale (`layers.rms_norm`), computed in fp32."""

    eps: float
    param_dtype: Any = jnp.float32
    axis_name: str = "norm"

    @nn.compact
    def __call__(self, x: Array) -> Array:
        scale = self.param("scale", nn.with_logical_partitioning(nn.initializers.ones, (self.axis_name,)),
                           (x.shape[-1],), self.param_dtype)
        return rms_norm(x, scale, self.eps)


class NormScale(nn.Module):
    """An RMSNorm's learned scale `[size]` (ones at init), for `layers.rms_norm` to apply."""

    size: int
    param_dtype: Any = jnp.float32
    axis_name: str = "norm"

    @nn.compact
    def __call__(self) -> Array:
        return self.param("scale", nn.with_logical_partitioning(nn.initializers.ones, (self.axis_name,)),
                          (self.size,), self.param_dtype)


def _dense(module: nn.Module, name: str, shape: tuple, axes: tuple, cfg: ModelConfig, fan_in: int):
    init = nn.initializers.normal(stddev=1.0 / math.sqrt(fan_in))
    return module.param(name, nn.with_logical_partitioning(init, axes), shape, _DTYPES[cfg.param_dtype])


def _tokens(x: Array, w: Array) -> Array:
    """`x [B, T, D_in] . w [D_in, ...]` -> `[B, T, ...]` as one `[B*T, D_in]` matmul (the stacked
    forward's `matmul` for `layers.decoder_layer`).

    With the batch and length axes merged, the weight gradient contracts a single token axis;
    XLA:CPU runs a two-axis contraction through transposes and a slower kernel (figures:
    docs/results/2026-12-01-train-step-mfu.md).
    """
    b, t, d = x.shape
    return (x.reshape(b * t, d) @ w.reshape(d, -1)).reshape(b, t, *w.shape[1:])


class Attention(nn.Module):
    """The attention block's params, as `layers.decoder_layer` weights in the compute dtype:
    q `[D, N, Dh]`, k/v `[D, K, Dh]`, o `[N*Dh, D]` (stored `[N, Dh, D]`), and per family the
    q/k/v biases, the o bias, the sink logits and the q/k norm scales."""

    cfg: ModelConfig

    @nn.compact
    def __call__(self) -> dict:
        cfg, dt, pdt = self.cfg, _DTYPES[self.cfg.dtype], _DTYPES[self.cfg.param_dtype]
        d, n, k, h = cfg.hidden, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        p = {"q": _dense(self, "q", (d, n, h), ("embed", "heads", "head_dim"), cfg, d),
             "k": _dense(self, "k", (d, k, h), ("embed", "kv_heads", "head_dim"), cfg, d),
             "v": _dense(self, "v", (d, k, h), ("embed", "kv_heads", "head_dim"), cfg, d),
             "o": _dense(self, "o", (n, h, d), ("heads", "head_dim", "embed"), cfg, n * h).reshape(n * h, d)}
        zeros = nn.initializers.zeros
        if cfg.qkv_bias:
            for name, heads, axis in (("q", n, "heads"), ("k", k, "kv_heads"), ("v", k, "kv_heads")):
                p[f"{name}_bias"] = self.param(f"{name}_bias", nn.with_logical_partitioning(zeros, (axis, "head_dim")),
                                               (heads, h), pdt)
        p = {name: w.astype(dt) for name, w in p.items()}
        if cfg.attn_sinks:
            p["sinks"] = self.param("sinks", nn.with_logical_partitioning(zeros, ("heads",)), (n,), pdt)
        if cfg.qk_norm:
            p["q_norm"] = NormScale(h, pdt, "head_dim", name="q_norm")()
            p["k_norm"] = NormScale(h, pdt, "head_dim", name="k_norm")()
        if cfg.o_bias:
            p["o_bias"] = self.param("o_bias", nn.with_logical_partitioning(zeros, ("embed",)), (d,), pdt).astype(dt)
        return p


class MLP(nn.Module):
    """The SwiGLU feed-forward's params in the compute dtype: gate/up `[D, F]`, down `[F, D]`."""

    cfg: ModelConfig

    @nn.compact
    def __call__(self) -> dict:
        cfg, dt = self.cfg, _DTYPES[self.cfg.dtype]
        d, f = cfg.hidden, cfg.intermediate
        return {"gate": _dense(self, "gate", (d, f), ("embed", "mlp"), cfg, d).astype(dt),
                "up": _dense(self, "up", (d, f), ("embed", "mlp"), cfg, d).astype(dt),
                "down": _dense(self, "down", (f, d), ("mlp", "embed"), cfg, f).astype(dt)}


def _stacked_attention(cfg: ModelConfig, mesh: Optional[Mesh], prefill: bool, mask, layer_kv, write_index,
                       q: Array, key: Array, val: Array, sinks: Optional[Array]) -> tuple:
    """The stacked forward's attention core (`layers.decoder_layer`'s `attend`): writes the new
    keys/values in place into the full `[L, B, S, K, Dh]` cache (`layer_kv`, if any), then
    runs the kernel for the call's kind. Returns (out `[B, T, N, Dh]`, the updated `layer_kv`)."""
    dt, scale = _DTYPES[cfg.dtype], 1.0 / math.sqrt(cfg.head_dim)
    q = _constrain(q, ("batch", "length", "heads", "head_dim"), mesh)
    if layer_kv is not None:
        cache_k, cache_v, layer_idx = layer_kv
        at = (layer_idx, 0, write_index, 0, 0)
        cache_k = jax.lax.dynamic_update_slice(cache_k, key[None].astype(cache_k.dtype), at)
        cache_v = jax.lax.dynamic_update_slice(cache_v, val[None].astype(cache_v.dtype), at)
        if not prefill:  # decode reads the layer's whole cache; prefill only its own keys
            key, val = cache_k[layer_idx].astype(dt), cache_v[layer_idx].astype(dt)
        layer_kv = (cache_k, cache_v, layer_idx)
    if sinks is not None:  # every path: `mask` is explicit [B, 1, T, S] here (`Decoder`)
        out = sink_attention(q, key, val, mask, sinks, scale)
    elif prefill:
        out = prefill_attention(q, key, val, mask, scale)
    elif layer_kv is None:
        out = causal_block_attention(q, key, val, mask, scale, fused=cfg.remat_policy != "full")
    else:
        out = jax.nn.dot_product_attention(q, key, val, mask=mask, scale=scale)
    return _constrain(out, ("batch", "length", "heads", "head_dim"), mesh), layer_kv


class Layer(nn.Module):
    """One decoder layer (`layers.decoder_layer`); the scan body. Carry: (x, cache_k, cache_v).
    Declares the layer's params (`attn_norm`, `attn`, `mlp_norm`, `mlp`) and sows the MoE
    router's (logits, chosen) as intermediates."""

    cfg: ModelConfig
    mesh: Optional[Mesh] = None
    prefill: bool = False

    @nn.compact
    def __call__(self, carry, layer_idx, cos, sin, mask, write_index):
        x, cache_k, cache_v = carry
        cfg, pdt = self.cfg, _DTYPES[self.cfg.param_dtype]
        if isinstance(mask, tuple):  # (full, sliding-window) masks: the layer's kind picks one
            full, window = mask
            mask = jnp.where(jnp.asarray(cfg.sliding_layers)[layer_idx], window, full)
        p = {"attn_norm": NormScale(cfg.hidden, pdt, name="attn_norm")(), **Attention(cfg, name="attn")(),
             "mlp_norm": NormScale(cfg.hidden, pdt, name="mlp_norm")()}
        if cfg.is_moe:
            p["moe"] = MoEParams(cfg, pdt, name="mlp")()
        else:
            p.update(MLP(cfg, name="mlp")())
        layer_kv = None if cache_k is None else (cache_k, cache_v, layer_idx)
        attend = functools.partial(_stacked_attention, cfg, self.mesh, self.prefill, mask, layer_kv, write_index)
        x, layer_kv, router = decoder_layer(cfg, p, x, cos, sin, attend, _tokens, self.mesh)
        if router is not None:
            self.sow("intermediates", "router", router)
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
        x = embed_tokens(embed, tokens, dt, self.mesh, ("batch", "length"))  # [B, T, D]

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
# sampling program. Each layer still runs `layers.decoder_layer`, with output-major weights
# (`_apply`) and the per-group cache attention as its `attend`.
# ---------------------------------------------------------------------------------------


def can_fuse(mesh: Optional[Mesh]) -> bool:
    """Fused q/k/v and gate/up weights only where the heads/mlp axes are not split over
    `tensor` (concatenating tensor-sharded blocks would interleave the shards)."""
    return mesh is None or mesh.shape.get("tensor", 1) == 1


def decode_weights(cfg: ModelConfig, params, mesh: Optional[Mesh] = None, fuse: Optional[bool] = None):
    """Per-layer decode weights from the stacked params, cast to the compute dtype.

    Returns `{"layers": (layer_0, ..., layer_{L-1}), "embed", "final_norm", "head"}`, each layer
    a `layers.decoder_layer` weight dict. Every matrix is stored output-major, `[out, in]`, and
    applied by `_apply` (contracting its last axis). Which form XLA:CPU runs faster depends on the host (docs/results/2026-12-01-decode-profile.md);
    one fixed layout keeps programs and rounding host-independent. The tied head
    is the embedding table itself (`[V, D]`, no copy). A layer has `attn_norm`, `mlp_norm`,
    `o` `[D, N*Dh]`, `down` `[D, F]` and either fused `qkv` `[(N+2K)*Dh, D]` and `gate_up`
    `[2F, D]`, or separate `q`/`k`/`v`/`gate`/`up`; the family's biases, sinks and q/k norms
    keep their param shapes (a mixture of experts keeps its params under `moe`).
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
    x = embed_tokens(weights["embed"], tokens, dt, mesh, ("batch",))  # [B, D]
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
                    cache_k = cache_k.at[own, :, :, slot].set(key[rows].astype(cache_k.dtype), unique_indices=True)
                    cache_v = cache_v.at[own, :, slot].set(val[rows].astype(cache_v.dtype), unique_indices=True)
                else:
                    cache_k = jax.lax.dynamic_update_slice(cache_k, key[rows, :, :, None].astype(cache_k.dtype),
                                                           (0, 0, 0, slot))
                    cache_v = jax.lax.dynamic_update_slice(cache_v, val[rows, :, None].astype(cache_v.dtype),
                                                           (0, 0, slot, 0))
                layer_caches.append((cache_k, cache_v))
                outs.append(cache_attention(q[rows], cache_k, cache_v, mask_of(j, size, window), scale, sinks))
            return (outs[0] if len(outs) == 1 else jnp.concatenate(outs, axis=0)).astype(dt), layer_caches

        x, layer_caches, _ = decoder_layer(cfg, layer, x, cos, sin, attend, _apply, mesh, ("batch",))
        for j, kv in enumerate(layer_caches):
            new_caches[j].append(kv)
    x = rms_norm(x, weights["final_norm"], cfg.rms_eps)
    logits = _apply(x, weights["head"], jnp.float32)
    return _constrain(logits, ("batch", "vocab"), mesh), tuple(tuple(c) for c in new_caches)
