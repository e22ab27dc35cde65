"""Decoder hyper-parameters and the named model table.

One `ModelConfig` covers the three families the decoder implements:
Llama-3 / SmolLM2 (`llama`), Qwen2.5 (`qwen2`, q/k/v bias) and Qwen3 (`qwen3`,
per-head q/k RMSNorm).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

FAMILIES = ("llama", "qwen2", "qwen3")
DTYPES = ("float32", "bfloat16")
# What a layer keeps for its backward pass (`ModelConfig.remat`); True / False are "full" / "none".
REMAT_POLICIES = ("none", "full", "dots", "dots_no_batch")


@dataclasses.dataclass(frozen=True)
class RopeScaling:
    """Llama-3.1 RoPE frequency scaling (the `rope_type: llama3` block of config.json)."""

    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position: int = 8192


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Shapes and numerics of one decoder-only LM, plus its chat-template switch.

    `scan_unroll` layers run per iteration of the scanned stack (`lax.scan(unroll=...)`; the
    params stay stacked): 1 compiles one layer; `num_layers` compiles them all: a longer compile for
    a faster step on XLA:CPU (docs/results/2026-12-01-train-step-mfu.md).

    `remat` is what each scanned layer keeps for the backward pass (`jax.checkpoint` policies,
    as MaxText's `remat_policy`): "none" (or False) keeps every intermediate; "full" (or True)
    only the layer's input, recomputing the layer (about 4/3 the FLOPs); "dots" the outputs
    of every matmul; "dots_no_batch" (default) those of the weight matmuls only, recomputing
    norms, RoPE, activations and the attention scores. Both partial policies also keep the
    training attention's output and log-sum-exp (`prd_jax.model.attention`). The last two recompute no weight
    matmul (step times per policy: docs/results/2026-12-01-train-step-mfu.md).

    `enable_thinking` is passed to the chat template as the `enable_thinking` variable
    (Qwen3's switch between a `<think>` block and a direct answer): None leaves the
    template's own default (Qwen3: thinking on), True/False set it. It does not change
    the decoder; `prd_jax.model.tokenizer.for_model` applies it to a tokenizer, so
    eval, SFT and RL prompts all render with it.
    """

    family: str
    vocab_size: int
    hidden: int
    intermediate: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float = 10000.0
    rope_scaling: Optional[RopeScaling] = None
    rms_eps: float = 1e-5
    tie_embeddings: bool = True
    max_position: int = 8192
    param_dtype: str = "float32"
    dtype: str = "float32"
    remat: Any = "dots_no_batch"
    scan_unroll: int = 1
    enable_thinking: Optional[bool] = None

    @property
    def remat_policy(self) -> str:
        """`remat` as one of REMAT_POLICIES (True -> "full", False -> "none")."""
        if isinstance(self.remat, bool):
            return "full" if self.remat else "none"
        return self.remat

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise ValueError(f"ModelConfig.family={self.family!r}; allowed: {FAMILIES}")
        if self.enable_thinking is not None and not isinstance(self.enable_thinking, bool):
            raise ValueError(f"ModelConfig.enable_thinking={self.enable_thinking!r}; allowed: None, True, False")
        for field in ("param_dtype", "dtype"):
            if getattr(self, field) not in DTYPES:
                raise ValueError(f"ModelConfig.{field}={getattr(self, field)!r}; allowed: {DTYPES}")
        if not isinstance(self.remat, bool) and self.remat not in REMAT_POLICIES:
            raise ValueError(f"ModelConfig.remat={self.remat!r}; allowed: True, False or one of {REMAT_POLICIES}")
        if not isinstance(self.scan_unroll, int) or not 1 <= self.scan_unroll <= self.num_layers:
            raise ValueError(f"ModelConfig.scan_unroll={self.scan_unroll!r}; allowed: an int in 1..num_layers="
                             f"{self.num_layers}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"ModelConfig.num_heads={self.num_heads} must be a multiple of "
                f"num_kv_heads={self.num_kv_heads} (grouped-query attention)")

    @property
    def qkv_bias(self) -> bool:
        return self.family == "qwen2"

    @property
    def qk_norm(self) -> bool:
        return self.family == "qwen3"

    def replace(self, **kw: Any) -> "ModelConfig":
        return dataclasses.replace(self, **kw)

    def num_params(self) -> int:
        """Parameter count implied by the shapes (embeddings counted once when tied)."""
        d, q, kv = self.hidden, self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        attn = d * q + 2 * d * kv + q * d + (q + 2 * kv if self.qkv_bias else 0)
        attn += 2 * self.head_dim if self.qk_norm else 0
        layer = attn + 3 * d * self.intermediate + 2 * d
        embed = self.vocab_size * d * (1 if self.tie_embeddings else 2)
        return self.num_layers * layer + embed + d


def _llama31_scaling() -> RopeScaling:
    return RopeScaling(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                       original_max_position=8192)


NAMED_CONFIGS: dict[str, ModelConfig] = {
    # Tiny random model for tests: every code path (GQA, tied embeddings), seconds to compile.
    "tiny": ModelConfig("llama", vocab_size=256, hidden=64, intermediate=128, num_layers=2,
                        num_heads=4, num_kv_heads=2, head_dim=16, max_position=512),
    "smollm2-135m": ModelConfig("llama", 49152, 576, 1536, 30, 9, 3, 64, rope_theta=100000.0,
                                rms_eps=1e-5, tie_embeddings=True, max_position=8192),
    "qwen2.5-0.5b": ModelConfig("qwen2", 151936, 896, 4864, 24, 14, 2, 64, rope_theta=1e6,
                                rms_eps=1e-6, tie_embeddings=True, max_position=32768),
    "qwen2.5-1.5b": ModelConfig("qwen2", 151936, 1536, 8960, 28, 12, 2, 128, rope_theta=1e6,
                                rms_eps=1e-6, tie_embeddings=True, max_position=32768),
    "qwen2.5-7b": ModelConfig("qwen2", 152064, 3584, 18944, 28, 28, 4, 128, rope_theta=1e6,
                              rms_eps=1e-6, tie_embeddings=False, max_position=32768),
    "qwen3-0.6b": ModelConfig("qwen3", 151936, 1024, 3072, 28, 16, 8, 128, rope_theta=1e6,
                              rms_eps=1e-6, tie_embeddings=True, max_position=40960),
    "qwen3-1.7b": ModelConfig("qwen3", 151936, 2048, 6144, 28, 16, 8, 128, rope_theta=1e6,
                              rms_eps=1e-6, tie_embeddings=True, max_position=40960),
    "qwen3-4b": ModelConfig("qwen3", 151936, 2560, 9728, 36, 32, 8, 128, rope_theta=1e6,
                            rms_eps=1e-6, tie_embeddings=True, max_position=40960),
    # Qwen3-4B-Instruct-2507 (the V1 paper's model): the qwen3-4b architecture; its config.json
    # has rope_theta 5e6 and a 262144-token context.
    "qwen3-4b-instruct-2507": ModelConfig("qwen3", 151936, 2560, 9728, 36, 32, 8, 128, rope_theta=5e6,
                                          rms_eps=1e-6, tie_embeddings=True, max_position=262144),
    "qwen3-8b": ModelConfig("qwen3", 151936, 4096, 12288, 36, 32, 8, 128, rope_theta=1e6,
                            rms_eps=1e-6, tie_embeddings=False, max_position=40960),
    "llama3.1-8b": ModelConfig("llama", 128256, 4096, 14336, 32, 32, 8, 128, rope_theta=500000.0,
                               rope_scaling=_llama31_scaling(), rms_eps=1e-5,
                               tie_embeddings=False, max_position=131072),
}


def get_model_config(name: str, **overrides: Any) -> ModelConfig:
    """Named config, with field overrides (e.g. `dtype="bfloat16"`)."""
    if name not in NAMED_CONFIGS:
        raise ValueError(f"unknown model {name!r}; known models: {sorted(NAMED_CONFIGS)}")
    return NAMED_CONFIGS[name].replace(**overrides)


def from_hf_config(hf: dict) -> ModelConfig:
    """ModelConfig from a transformers `config.json` dict (llama, qwen2 or qwen3)."""
    model_type = hf.get("model_type")
    if model_type not in FAMILIES:
        raise ValueError(f"config.json model_type={model_type!r}; supported: {FAMILIES}")
    for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                "num_attention_heads"):
        if key not in hf:
            raise ValueError(f"config.json is missing required key {key!r}")
    heads = hf["num_attention_heads"]
    scaling = None
    rope_params = hf.get("rope_parameters") or {}  # transformers>=5 layout
    rs = hf.get("rope_scaling") or rope_params
    rope_type = rs.get("rope_type", rs.get("type"))
    if rope_type == "llama3":
        scaling = RopeScaling(float(rs["factor"]), float(rs["low_freq_factor"]),
                              float(rs["high_freq_factor"]),
                              int(rs["original_max_position_embeddings"]))
    elif rope_type not in (None, "default"):
        raise ValueError(f"config.json rope_scaling.rope_type={rope_type!r}; supported: llama3, default")
    if model_type == "qwen2" and hf.get("use_sliding_window"):
        raise ValueError("config.json use_sliding_window=true is not supported; allowed: false")
    tie = hf.get("tie_word_embeddings", False)  # transformers' default for all three families
    return ModelConfig(
        family=model_type,
        vocab_size=hf["vocab_size"],
        hidden=hf["hidden_size"],
        intermediate=hf["intermediate_size"],
        num_layers=hf["num_hidden_layers"],
        num_heads=heads,
        num_kv_heads=hf.get("num_key_value_heads") or heads,
        head_dim=hf.get("head_dim") or hf["hidden_size"] // heads,
        rope_theta=float(hf.get("rope_theta", rope_params.get("rope_theta", 10000.0))),
        rope_scaling=scaling,
        rms_eps=float(hf.get("rms_norm_eps", 1e-6)),
        tie_embeddings=bool(tie),
        max_position=int(hf.get("max_position_embeddings", 8192)),
    )
