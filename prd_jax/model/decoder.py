"""Decoder-only transformer (Flax Linen): the params and the forward pass, for the Llama-3 /
SmolLM2, Qwen2.5, Qwen3 and GPT-OSS families.

`forward(cfg, params, tokens, positions, cache)` is the pure entry point: it returns
`(logits, new_cache)`. Layers are stacked and run with `nn.scan` (docs/design.md,
"Model"); the KV cache (`decode.KVCache`, `[L, B, S, K, Dh]`, its left-padded slot semantics
in the `decode` module docstring) travels in the scan carry so each step writes one token in
place instead of copying the cache.

The layer math lives in `prd_jax.model.layers` (`decoder_layer`), which both the scanned
`Layer` and the unrolled decode step (`decode.decode_step_groups`) call; the attention cores
live in `prd_jax.model.attention`. This module holds the param declarations, the masks and
the stacked forward's `attend` (cache writes and the choice of core).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from prd_jax.model.attention import SAVED_NAMES, causal_block_attention, prefill_attention, sink_attention
from prd_jax.model.config import ModelConfig
from prd_jax.model.decode import KVCache
from prd_jax.model.layers import constrain as _constrain, decoder_layer, embed_tokens, rms_norm, rope_tables
from prd_jax.model.moe import MoEParams, load_balancing_loss

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
