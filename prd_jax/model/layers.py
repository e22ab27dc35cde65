"""The decoder layer's math, written once: pure functions over one layer's weights.

Both the stacked forward (`decoder.Layer`, the `nn.scan` body used by training, scoring and
prefill) and the unrolled decode step (`decode.decode_step_groups`) run a layer through
`decoder_layer`. They differ only where the caller passes a function in:

- `matmul(x [..., in], w) -> [..., out]`: the weight layout. The stacked forward keeps the
  param tree's input-major `[in, out...]` matrices; the decode weights are output-major
  `[out, in]`, with q/k/v and gate/up optionally fused (`decode.decode_weights`).
- `attend(q, k, v, sinks) -> (out, state)`: the attention core, with its cache, mask and
  kernel (`attention.causal_block_attention`, `attention.prefill_attention`,
  `attention.cache_attention`, `attention.sink_attention`). `state` is handed back untouched.
- `lead`: the logical names of the leading axes, for the sharding constraints
  (`("batch", "length")` or `("batch",)`).

One layer's weights are a flat dict, the same keys on both paths:

    attn_norm, mlp_norm             RMSNorm scales [D]
    q, k, v   or  qkv               projections (layout: `matmul`'s)
    q_bias, k_bias, v_bias          [N, Dh], [K, Dh] (cfg.qkv_bias: Qwen2)
    q_norm, k_norm                  per-head RMSNorm scales [Dh] (cfg.qk_norm: Qwen3)
    sinks                           [N] (cfg.attn_sinks: GPT-OSS, `attention.sink_attention`)
    o, o_bias                       output projection from [N*Dh]; bias [D] (cfg.o_bias)
    gate, up  or  gate_up, down     SwiGLU feed-forward (dense families)
    moe                             expert params (cfg.is_moe: `prd_jax.model.moe`)

A new model family changes the math here, and its weight names in `decoder.Layer`'s param
declarations, `decode.decode_weights` and `hf_names` (docs/extending.md, "A model family").
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from prd_jax.mesh import logical_to_spec, named_sharding
from prd_jax.model.config import ModelConfig, RopeScaling, YarnScaling
from prd_jax.model.moe import moe_sequence

Array = jax.Array
Matmul = Callable[[Array, Array], Array]
Attend = Callable[[Array, Array, Array, Optional[Array]], tuple]


def constrain(x: Array, names: tuple, mesh: Optional[Mesh]) -> Array:
    """`x` sharded by logical axis `names` on `mesh` (docs/design.md, principle 5); no-op without one."""
    if mesh is None:
        return x
    return jax.lax.with_sharding_constraint(x, named_sharding(names, mesh, x.shape))


def rms_norm(x: Array, scale: Array, eps: float) -> Array:
    """RMSNorm over the last axis with a learned scale, computed in fp32, returned in x's dtype."""
    x32 = x.astype(jnp.float32)
    y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return (y * scale.astype(jnp.float32)).astype(x.dtype)


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
    """Rotate heads `x [..., N, Dh]` by position, cos/sin `[..., Dh/2]` (one per token, shared
    by the heads); the half-split layout of HF Llama/Qwen, computed in fp32."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half].astype(jnp.float32), x[..., half:].astype(jnp.float32)
    cos, sin = cos[..., None, :], sin[..., None, :]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)


def embed_tokens(table: Array, tokens: Array, dtype, mesh: Optional[Mesh], lead: tuple) -> Array:
    """Rows of the embedding `table [V, D]` for `tokens [...]`, in `dtype`. The lookup reads a
    replicated view of the table (one all-gather under a mesh)."""
    x = jnp.take(constrain(table, (None, None), mesh), tokens, axis=0).astype(dtype)
    return constrain(x, (*lead, "embed"), mesh)


def embed_tokens_local(table: Array, tokens: Array, dtype, mesh: Optional[Mesh], lead: tuple) -> Array:
    """`embed_tokens` without gathering a vocab-sharded table: each of the S vocab shards looks
    up the tokens in its own block of `V / S` rows (zeros for tokens outside it) and the S
    partial rows are summed, one all-reduce of `[..., D]` instead of an all-gather of the
    table (the decode step's lookup, once per generated token). Exactly one shard holds a
    token's row, so the sum equals `embed_tokens`' rows. `embed_tokens` when the vocab axis
    is not split (no mesh, or a mesh whose `vocab` axes are size 1 or do not divide V)."""
    if mesh is None:
        return embed_tokens(table, tokens, dtype, mesh, lead)
    axes = logical_to_spec(("vocab", "embed"), mesh, table.shape)[0]
    shards = math.prod(mesh.shape[a] for a in ((axes,) if isinstance(axes, str) else axes or ()))
    if shards == 1:
        return embed_tokens(table, tokens, dtype, mesh, lead)
    v, d = table.shape
    block = v // shards
    blocks = constrain(table.reshape(shards, block, d), ("vocab", None, "embed"), mesh)
    local = tokens[None] - (jnp.arange(shards) * block).reshape(shards, *(1,) * tokens.ndim)  # [S, ...]
    rows = jax.vmap(lambda b, i: jnp.take(b, i, axis=0))(blocks, jnp.clip(local, 0, block - 1))
    inside = ((local >= 0) & (local < block))[..., None]
    x = jnp.where(inside, rows, jnp.zeros((), rows.dtype)).sum(axis=0).astype(dtype)
    return constrain(x, (*lead, "embed"), mesh)


def attention_inputs(cfg: ModelConfig, p: dict, y: Array, cos: Array, sin: Array, matmul: Matmul) -> tuple:
    """q `[..., N, Dh]`, k, v `[..., K, Dh]` of the normed input `y [..., D]`: projections,
    their biases (Qwen2), per-head RMSNorm of q and k (Qwen3), then RoPE on q and k."""
    n, k, h = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    lead = y.shape[:-1]
    if "qkv" in p:
        q, key, val = jnp.split(matmul(y, p["qkv"]), [n * h, (n + k) * h], axis=-1)
    else:
        q, key, val = matmul(y, p["q"]), matmul(y, p["k"]), matmul(y, p["v"])
    q, key, val = q.reshape(*lead, n, h), key.reshape(*lead, k, h), val.reshape(*lead, k, h)
    if cfg.qkv_bias:
        q, key, val = q + p["q_bias"], key + p["k_bias"], val + p["v_bias"]
    if cfg.qk_norm:
        q, key = rms_norm(q, p["q_norm"], cfg.rms_eps), rms_norm(key, p["k_norm"], cfg.rms_eps)
    return apply_rope(q, cos, sin), apply_rope(key, cos, sin), val


def attention_output(cfg: ModelConfig, p: dict, out: Array, matmul: Matmul) -> Array:
    """The output projection of the heads' outputs `out [..., N*Dh]` (any shape that flattens
    to it, heads in order), plus its bias (GPT-OSS) -> `[..., D]`."""
    y = matmul(out, p["o"])
    return y + p["o_bias"] if cfg.o_bias else y


def feed_forward(cfg: ModelConfig, p: dict, y: Array, matmul: Matmul, mesh: Optional[Mesh],
                 lead: tuple) -> tuple:
    """The feed-forward of the normed `y [..., D]`: SwiGLU `down(silu(gate(y)) * up(y))`, or the
    mixture of experts (`moe.moe_sequence`). Returns (out `[..., D]`, router), router being
    (logits `[tokens, E]`, chosen `[tokens, k]`) for the MoE and None otherwise."""
    if cfg.is_moe:
        out, logits, chosen = moe_sequence(y, p["moe"], cfg.experts_per_token, cfg.swiglu_limit, cfg.swiglu_alpha,
                                           cfg.moe_dispatch, cfg.moe_chunk)
        return out, (logits, chosen)
    if "gate_up" in p:
        gate, up = jnp.split(matmul(y, p["gate_up"]), 2, axis=-1)
    else:
        gate, up = matmul(y, p["gate"]), matmul(y, p["up"])
    hid = constrain(jax.nn.silu(gate) * up, (*lead, "mlp"), mesh)
    return matmul(hid, p["down"]), None


def layer_weight_names(cfg: ModelConfig, p: dict) -> list:
    """The weight names a layer of `cfg`'s family needs (the fused or separate projections,
    as `p` holds them)."""
    names = ["attn_norm", "mlp_norm", "o"] + (["qkv"] if "qkv" in p else ["q", "k", "v"])
    names += ["q_bias", "k_bias", "v_bias"] if cfg.qkv_bias else []
    names += ["q_norm", "k_norm"] if cfg.qk_norm else []
    names += ["sinks"] if cfg.attn_sinks else []
    names += ["o_bias"] if cfg.o_bias else []
    if cfg.is_moe:
        return names + ["moe"]
    return names + (["gate_up"] if "gate_up" in p else ["gate", "up"]) + ["down"]


def decoder_layer(cfg: ModelConfig, p: dict, x: Array, cos: Array, sin: Array, attend: Attend,
                  matmul: Matmul, mesh: Optional[Mesh] = None, lead: tuple = ("batch", "length")) -> tuple:
    """One pre-norm decoder layer on the residual stream `x [..., D]`:

        x = x + o(attend(rope(qkv(norm(x)))));   x = x + ffn(norm(x))

    Returns (x, the `attend` state, the MoE router or None). `attend(q, k, v, sinks)` gets the
    RoPE'd q `[..., N, Dh]`, k/v `[..., K, Dh]` and the layer's sink logits (or None) and
    returns the heads' outputs (flattening to `[..., N*Dh]`) and a state (the updated cache).
    """
    missing = [name for name in layer_weight_names(cfg, p) if name not in p]
    if missing:
        raise ValueError(f"decoder_layer: the {cfg.family} layer weights lack {missing}; have {sorted(p)}")
    y = rms_norm(x, p["attn_norm"], cfg.rms_eps)
    q, key, val = attention_inputs(cfg, p, y, cos, sin, matmul)
    out, state = attend(q, key, val, p["sinks"] if cfg.attn_sinks else None)
    x = x + attention_output(cfg, p, out.reshape(*x.shape[:-1], -1), matmul)
    y, router = feed_forward(cfg, p, rms_norm(x, p["mlp_norm"], cfg.rms_eps), matmul, mesh, lead)
    return constrain(x + y, (*lead, "embed"), mesh), state, router
