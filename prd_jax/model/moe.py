"""Mixture-of-experts feed-forward (GPT-OSS): a biased top-k router and clamped-SwiGLU experts.

Per token x `[D]` (OpenAI, "gpt-oss-120b & gpt-oss-20b Model Card", 2025, Sec. 2.1; the
arithmetic follows transformers' `GptOssMLP`):

    logits = x W_r + b_r                       [E]
    chosen = top_k(logits, k);  w = softmax(logits[chosen])   (over the k chosen only)
    h_e    = x W_gu[e] + b_gu[e]               [2F], gate = h_e[0::2], up = h_e[1::2]
    gate   = min(gate, limit);  up = clip(up, -limit, limit)
    y_e    = ((up + 1) * gate * sigmoid(alpha * gate)) W_d[e] + b_d[e]
    out    = sum_{e in chosen} w_e y_e

Params (one layer): `router [D, E]`, `router_bias [E]`, `gate_up [E, D, 2F]` (gate and up
columns interleaved, as the checkpoint stores them), `gate_up_bias [E, 2F]`, `down [E, F, D]`,
`down_bias [E, D]`; the expert axis carries the logical name `expert`.

`moe_sequence` runs a `[B, S, D]` block in chunks of `chunk` positions of every row (a
`lax.map` whose body is rematerialised): the dispatch's buffers then grow with `B * chunk`
tokens instead of `B * S`, in the forward and the backward alike. Tokens do not interact in
the MoE, so a chunked block's output and routing equal the whole block's.

The gate and up columns are split on the weights (`split_gate_up`: a reshape to pairs and a
move of the pair axis), and each half runs as its own matmul. Strided slices of the
activations (`h[..., 0::2]`) would be cheaper to write but their backward is a pad with
interior padding, which XLA:TPU emits transfer by transfer: a GPT-OSS-20B train step's compile
then took more than 20 GB of host memory (docs/results/2026-12-04-aot-fit-5.md).

Two dispatches compute `out`:
- "grouped": the N*k (token, expert) pairs are sorted by expert and each expert's
  contiguous group runs through one `jax.lax.ragged_dot` (work ~ N*k rows);
- "dense": every expert runs on every token and the outputs are combined with the routing
  weights (zero off the chosen experts); work ~ N*E rows. The tests' reference only.
"""

from __future__ import annotations

import math
from typing import Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from prd_jax.model.chunks import join_chunks, split_chunks

Array = jax.Array
EXPERT_AXES = {
    "router": ("embed", None), "router_bias": (None,),
    "gate_up": ("expert", "embed", "mlp"), "gate_up_bias": ("expert", "mlp"),
    "down": ("expert", "mlp", "embed"), "down_bias": ("expert", "embed"),
}


def route(x: Array, router: Array, router_bias: Array, k: int) -> tuple:
    """Router of tokens x `[N, D]`: (all logits `[N, E]` fp32, chosen experts `[N, k]`,
    their weights `[N, k]` fp32, a softmax over the k chosen logits)."""
    logits = jnp.einsum("nd,de->ne", x, router.astype(x.dtype), preferred_element_type=jnp.float32)
    logits = logits + router_bias.astype(jnp.float32)
    top, chosen = jax.lax.top_k(logits, k)
    return logits, chosen, jax.nn.softmax(top, axis=-1)


def split_gate_up(w: Array) -> tuple:
    """Interleaved `[..., 2F]` columns (gate even, up odd: the checkpoint's layout) ->
    (gate, up), each `[..., F]`, without strided slices (see the module docstring)."""
    pairs = jnp.moveaxis(w.reshape(*w.shape[:-1], w.shape[-1] // 2, 2), -1, 0)  # [2, ..., F]
    return pairs[0], pairs[1]


def gated_unit(gate: Array, up: Array, limit: float, alpha: float) -> Array:
    """GPT-OSS's clamped SwiGLU of the gate and up pre-activations `[..., F]` -> `[..., F]`."""
    gate = jnp.minimum(gate, limit)
    up = jnp.clip(up, -limit, limit)
    return (up + 1) * (gate * jax.nn.sigmoid(gate * alpha))


def _gate_up_halves(p: dict) -> tuple:
    """((gate weights, gate bias), (up weights, up bias)) of one layer's expert params."""
    return tuple(zip(split_gate_up(p["gate_up"]), split_gate_up(p["gate_up_bias"])))


def experts_grouped(x: Array, chosen: Array, weights: Array, p: dict, limit: float, alpha: float) -> Array:
    """Sorted-token dispatch: x `[N, D]`, chosen/weights `[N, k]` -> `[N, D]` (fp32 accumulation)."""
    n, d = x.shape
    k = chosen.shape[1]
    e = p["gate_up"].shape[0]
    flat = chosen.reshape(-1)  # pair i = (token i // k, slot i % k)
    order = jnp.argsort(flat, stable=True)
    expert_sorted = flat[order]
    rows = jnp.take(x, order // k, axis=0)  # [N*k, D], grouped by expert
    sizes = jnp.bincount(flat, length=e).astype(jnp.int32)
    dt = x.dtype

    def half(w, b):  # one of gate / up: [N*k, F] fp32
        h = jax.lax.ragged_dot(rows, w.astype(dt), sizes, preferred_element_type=jnp.float32)
        return h + jnp.take(b, expert_sorted, axis=0).astype(jnp.float32)

    act = gated_unit(*(half(w, b) for w, b in _gate_up_halves(p)), limit, alpha).astype(dt)
    y = jax.lax.ragged_dot(act, p["down"].astype(dt), sizes, preferred_element_type=jnp.float32)
    y = y + jnp.take(p["down_bias"], expert_sorted, axis=0).astype(jnp.float32)
    unsorted = jnp.zeros_like(y).at[order].set(y, unique_indices=True).reshape(n, k, d)
    return jnp.einsum("nkd,nk->nd", unsorted, weights.astype(jnp.float32))


def experts_dense(x: Array, chosen: Array, weights: Array, p: dict, limit: float, alpha: float) -> Array:
    """All-experts reference: every expert on every token, combined by the routing weights."""
    e = p["gate_up"].shape[0]
    dt = x.dtype

    def half(w, b):  # one of gate / up: [E, N, F] fp32
        h = jnp.einsum("nd,edf->enf", x, w.astype(dt), preferred_element_type=jnp.float32)
        return h + b.astype(jnp.float32)[:, None, :]

    act = gated_unit(*(half(w, b) for w, b in _gate_up_halves(p)), limit, alpha).astype(dt)
    y = jnp.einsum("enf,efd->end", act, p["down"].astype(dt), preferred_element_type=jnp.float32)
    y = y + p["down_bias"].astype(jnp.float32)[:, None, :]
    combine = jnp.sum(jax.nn.one_hot(chosen, e, dtype=jnp.float32) * weights[..., None], axis=1)  # [N, E]
    return jnp.einsum("end,ne->nd", y, combine)


def moe_tokens(x: Array, p: dict, k: int, limit: float, alpha: float, dispatch: str = "grouped") -> tuple:
    """The MoE feed-forward of tokens x `[N, D]`: (output `[N, D]` in x's dtype, router logits
    `[N, E]` fp32, chosen experts `[N, k]`)."""
    logits, chosen, weights = route(x, p["router"], p["router_bias"], k)
    run = experts_grouped if dispatch == "grouped" else experts_dense
    return run(x, chosen, weights, p, limit, alpha).astype(x.dtype), logits, chosen


def moe_sequence(y: Array, p: dict, k: int, limit: float, alpha: float, dispatch: str = "grouped",
                 chunk: int = 0) -> tuple:
    """`moe_tokens` of `y [..., S, D]`, `chunk` positions of every row at a time (0, or S at
    most `chunk`: all at once). Returns (out `[..., S, D]`, router logits `[N, E]`, chosen
    `[N, k]`), N = the tokens in `y`'s row-major order, as `moe_tokens` of `y.reshape(-1, D)`."""
    d, s = y.shape[-1], (y.shape[-2] if y.ndim >= 2 else 1)
    if not chunk or y.ndim < 2 or s <= chunk:
        out, logits, chosen = moe_tokens(y.reshape(-1, d), p, k, limit, alpha, dispatch)
        return out.reshape(y.shape), logits, chosen
    rows = y.reshape(-1, s, d)  # [R, S, D]

    @jax.checkpoint  # the backward recomputes a chunk's dispatch from its input alone
    def one(block):  # [R, chunk, D] -> out [R, chunk, D], logits [R, chunk, E], chosen [R, chunk, k]
        out, logits, chosen = moe_tokens(block.reshape(-1, d), p, k, limit, alpha, dispatch)
        return tuple(x.reshape(*block.shape[:2], -1) for x in (out, logits, chosen))

    out, logits, chosen = (join_chunks(x, s) for x in jax.lax.map(one, split_chunks(rows, chunk)))
    return out.reshape(y.shape), logits.reshape(-1, logits.shape[-1]), chosen.reshape(-1, k)


def load_balancing_loss(logits: Array, chosen: Array, num_experts: int,
                        mask: Optional[Array] = None) -> tuple:
    """Switch-Transformer load-balancing loss (Fedus et al. 2021, arXiv 2101.03961, Eqs. 4-6),
    in the top-k form transformers uses for GPT-OSS: `E * sum_e f_e * P_e`, where `f_e` is the
    number of the tokens' k assignments that went to expert e divided by the token count (the
    f_e sum to k) and `P_e` the mean full-softmax router probability of expert e.

    logits `[N, E]`, chosen `[N, k]`, mask `[N]` (1 = a real token). Returns (sum, count) with
    sum = loss * count and count = number of real tokens, so that accumulation over
    micro-batches gives the same mean (docs/design.md, "Principles"). Uniform routing gives k.
    """
    m = jnp.ones(logits.shape[:1], jnp.float32) if mask is None else mask.astype(jnp.float32)
    count = jnp.sum(m)
    probs = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)
    assigned = jnp.sum(jax.nn.one_hot(chosen, num_experts, dtype=jnp.float32), axis=1)  # [N, E]
    f = jnp.sum(assigned * m[:, None], axis=0) / jnp.maximum(count, 1.0)
    prob = jnp.sum(probs * m[:, None], axis=0) / jnp.maximum(count, 1.0)
    loss = num_experts * jnp.sum(f * prob)
    return loss * count, count


class MoEParams(nn.Module):
    """The MoE feed-forward's params for one layer (names, shapes and logical axes as in the
    module docstring), as a dict in `param_dtype`; `layers.feed_forward` runs them."""

    cfg: object
    param_dtype: object = jnp.float32

    @nn.compact
    def __call__(self) -> dict:
        cfg = self.cfg
        d, f, e = cfg.hidden, cfg.intermediate, cfg.num_experts
        shapes = {"router": (d, e), "router_bias": (e,), "gate_up": (e, d, 2 * f), "gate_up_bias": (e, 2 * f),
                  "down": (e, f, d), "down_bias": (e, d)}
        fan_in = {"router": d, "gate_up": d, "down": f}
        p = {}
        for name, shape in shapes.items():
            init = (nn.initializers.normal(stddev=1.0 / math.sqrt(fan_in[name])) if name in fan_in
                    else nn.initializers.zeros)
            p[name] = self.param(name, nn.with_logical_partitioning(init, EXPERT_AXES[name]), shape,
                                 self.param_dtype)
        return p
