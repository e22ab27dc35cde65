"""Analytic FLOPs, bytes and roofline time of a program, from model shapes alone.

XLA's `cost_analysis` counts a `while` body once, so a 16k-step decode loop would read
as one step; these counts are computed from the shapes instead (`aot.decode_step` reads a
single compiled decode step for the per-step figures).

Conventions (per sequence of T tokens through the decoder):
- matmul FLOPs: 2 x (non-embedding params + the LM head where logits are taken) per token;
- attention FLOPs: 4 x layers x heads x head_dim per (query, attended key) pair; a causal
  prefill or training row has T(T+1)/2 pairs, a decode step attends the cache capacity
  (the sampler's decode attention is dense over all slots);
- training = 3 x forward (forward + backward), x 4/3 with full per-layer remat (the `dots` policies recompute no matmul).
"""

from __future__ import annotations

import dataclasses

from prd_jax.aot.chips import Chip
from prd_jax.model.config import ModelConfig

BYTES = {"float32": 4, "bfloat16": 2}


def matmul_params(cfg: ModelConfig) -> int:
    """Parameters used as matmul weights per token (embedding lookup excluded, head excluded)."""
    embed = cfg.vocab_size * cfg.hidden * (1 if cfg.tie_embeddings else 2)
    return cfg.num_params() - embed


def head_params(cfg: ModelConfig) -> int:
    return cfg.vocab_size * cfg.hidden


def attention_flops(cfg: ModelConfig, pairs: float) -> float:
    return 4.0 * cfg.num_layers * cfg.num_heads * cfg.head_dim * pairs


def forward_flops(cfg: ModelConfig, rows: int, width: int) -> float:
    """One forward pass over `rows` sequences of `width` tokens (logits at every position)."""
    return rows * (2.0 * (matmul_params(cfg) + head_params(cfg)) * width
                   + attention_flops(cfg, width * (width + 1) / 2))


def train_flops(cfg: ModelConfig, rows: int, width: int, updates: int = 1) -> float:
    """One optimizer step over `rows` sequences of `width` tokens (logits at every position)."""
    return updates * 3.0 * forward_flops(cfg, rows, width) * (4.0 / 3.0 if cfg.remat_policy == "full" else 1.0)


def kv_bytes_per_row(cfg: ModelConfig, capacity: int) -> float:
    """bf16/fp32 K and V for one row of `capacity` slots over all layers."""
    return 2.0 * cfg.num_layers * capacity * cfg.num_kv_heads * cfg.head_dim * BYTES[cfg.dtype]


@dataclasses.dataclass(frozen=True)
class SamplerShape:
    """One sampler call: `prompts` rows of width `prompt_len`, `samples` each, `gen_len` steps,
    decode rows in flight at most `max_rows` (0: all)."""

    prompts: int
    prompt_len: int
    samples: int
    gen_len: int
    max_rows: int = 0

    @property
    def rows(self) -> int:
        return self.prompts * self.samples

    @property
    def rows_in_flight(self) -> int:
        return min(self.rows, self.max_rows) if self.max_rows else self.rows


def sampler_flops(cfg: ModelConfig, s: SamplerShape) -> float:
    """Prefill once per prompt (logits at the last position), then `gen_len` decode steps per row."""
    prefill = s.prompts * (2.0 * matmul_params(cfg) * s.prompt_len + 2.0 * head_params(cfg)
                           + attention_flops(cfg, s.prompt_len * (s.prompt_len + 1) / 2))
    capacity = s.prompt_len + s.gen_len
    decode = s.rows * s.gen_len * (2.0 * (matmul_params(cfg) + head_params(cfg)) + attention_flops(cfg, capacity))
    return prefill + decode


@dataclasses.dataclass(frozen=True)
class Mesh3:
    """Mesh axis sizes as the analytic model needs them."""

    data: int
    fsdp: int
    tensor: int

    @property
    def devices(self) -> int:
        return self.data * self.fsdp * self.tensor


def _shard(n: int, by: int) -> float:
    return n / by if n % by == 0 else float(n)  # the mesh rules replicate a non-divisible axis


def kv_cache_bytes_per_device(cfg: ModelConfig, s: SamplerShape, mesh: Mesh3) -> float:
    """KV cache of the rows in flight, per device: rows over (data, fsdp), kv heads over tensor."""
    rows = _shard(s.rows_in_flight, mesh.data * mesh.fsdp)
    heads = _shard(cfg.num_kv_heads, mesh.tensor) / cfg.num_kv_heads
    return rows * kv_bytes_per_row(cfg, s.prompt_len + s.gen_len) * heads


def params_bytes_per_device(cfg: ModelConfig, mesh: Mesh3) -> float:
    """Master params (param_dtype) sharded over fsdp x tensor (the logical rules)."""
    return cfg.num_params() * BYTES[cfg.param_dtype] / (mesh.fsdp * mesh.tensor)


def train_state_bytes_per_device(cfg: ModelConfig, mesh: Mesh3, moments: int = 2) -> float:
    """Params, gradient accumulator and `moments` optimizer moments (all param_dtype), sharded."""
    return params_bytes_per_device(cfg, mesh) * (2 + moments)


def sampler_seconds(cfg: ModelConfig, s: SamplerShape, mesh: Mesh3, chip: Chip) -> float:
    """Roofline: prefill at peak FLOP/s; each decode step bound by max(FLOPs, bytes read) per chip,
    the bytes being the device's params (read once per step) and its KV cache."""
    n = mesh.devices
    prefill = s.prompts * (2.0 * matmul_params(cfg) * s.prompt_len
                           + attention_flops(cfg, s.prompt_len * (s.prompt_len + 1) / 2)) / n / chip.peak_flops
    chunks = -(-s.rows // s.rows_in_flight)
    return prefill + chunks * s.gen_len * decode_step_seconds(cfg, s, mesh, chip)


def decode_step_seconds(cfg: ModelConfig, s: SamplerShape, mesh: Mesh3, chip: Chip) -> float:
    """One decode step of the rows in flight over a full cache: max(FLOPs, bytes read) per chip,
    the bytes being the device's share of the params and its KV cache."""
    n = mesh.devices
    step_flops = s.rows_in_flight * (2.0 * (matmul_params(cfg) + head_params(cfg))
                                     + attention_flops(cfg, s.prompt_len + s.gen_len)) / n
    step_bytes = cfg.num_params() * BYTES[cfg.dtype] / n + kv_cache_bytes_per_device(cfg, s, mesh)
    return max(step_flops / chip.peak_flops, step_bytes / chip.hbm_bandwidth)


def decode_tok_s_per_chip(cfg: ModelConfig, s: SamplerShape, mesh: Mesh3, chip: Chip) -> float:
    """The analytic decode throughput: rows in flight / chips / `decode_step_seconds`."""
    return s.rows_in_flight / mesh.devices / decode_step_seconds(cfg, s, mesh, chip)


def train_seconds(cfg: ModelConfig, rows: int, width: int, mesh: Mesh3, chip: Chip, updates: int = 1) -> float:
    return train_flops(cfg, rows, width, updates) / mesh.devices / chip.peak_flops

