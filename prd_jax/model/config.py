"""Decoder hyper-parameters and the named model table.

One `ModelConfig` covers the four families the decoder implements:
Llama-3 / SmolLM2 (`llama`), Qwen2.5 (`qwen2`, q/k/v bias), Qwen3 (`qwen3`,
per-head q/k RMSNorm) and GPT-OSS (`gpt_oss`: mixture-of-experts MLP, q/k/v/o biases,
a learned sink logit per head, sliding-window attention on alternate layers, YaRN RoPE).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional

FAMILIES = ("llama", "qwen2", "qwen3", "gpt_oss")
MOE_DISPATCH = ("grouped", "dense")  # `ModelConfig.moe_dispatch`; "dense" is the tests' reference
DTYPES = ("float32", "bfloat16")
# What a layer keeps for its backward pass (`ModelConfig.remat`); True / False are "full" / "none".
REMAT_POLICIES = ("none", "full", "dots", "dots_no_batch")
# `ModelConfig.reasoning_effort`: the harmony chat template's reasoning levels (GPT-OSS).
REASONING_EFFORTS = ("low", "medium", "high")


@dataclasses.dataclass(frozen=True)
class RopeScaling:
    """Llama-3.1 RoPE frequency scaling (the `rope_type: llama3` block of config.json)."""

    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position: int = 8192


@dataclasses.dataclass(frozen=True)
class YarnScaling:
    """YaRN RoPE scaling (Peng et al. 2023, arXiv 2309.00071, Sec. 3.2-3.4; `rope_type: yarn`).

    Frequencies whose wavelength fits `beta_fast` or more times in the original context keep
    their value, those fitting `beta_slow` or fewer times are divided by `factor`, with a
    linear ramp between (over the rotary dimension index); cos and sin are multiplied by
    `attention_factor` (default `0.1 ln(factor) + 1`). `truncate` floors / ceils the ramp's
    ends to whole dimensions (transformers' default True; GPT-OSS sets False).
    """

    factor: float = 32.0
    original_max_position: int = 4096
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    truncate: bool = True
    attention_factor: Optional[float] = None

    @property
    def mscale(self) -> float:
        if self.attention_factor is not None:
            return float(self.attention_factor)
        return 1.0 if self.factor <= 1 else 0.1 * math.log(self.factor) + 1.0


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
    eval, SFT and RL prompts all render with it. `reasoning_effort` travels the same way as
    the template variable `reasoning_effort` (GPT-OSS's harmony template: "low", "medium"
    or "high" in its system message; None leaves the template's default).

    `router_aux_loss_coef` > 0 adds the router load-balancing loss to the SFT and RL steps of
    a mixture-of-experts model (`prd_jax.train.router_aux`; docs/training.md).
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
    rope_scaling: Optional[Any] = None  # RopeScaling (llama3) or YarnScaling
    rms_eps: float = 1e-5
    tie_embeddings: bool = True
    max_position: int = 8192
    param_dtype: str = "float32"
    dtype: str = "float32"
    remat: Any = "dots_no_batch"
    scan_unroll: int = 1
    enable_thinking: Optional[bool] = None
    reasoning_effort: Optional[str] = None
    # Mixture of experts (gpt_oss): `num_experts` SwiGLU experts, `experts_per_token` chosen
    # per token by a biased linear router (softmax over the chosen logits; `prd_jax.model.moe`).
    num_experts: int = 0
    experts_per_token: int = 0
    swiglu_limit: float = 7.0
    swiglu_alpha: float = 1.702
    moe_dispatch: str = "grouped"
    # Sequence positions of every row per MoE dispatch (`moe.moe_sequence`; 0 = the whole
    # block at once): bounds the dispatch's buffers in long prefills and training rows.
    moe_chunk: int = 0
    # Router load-balancing loss weight (`moe.load_balancing_loss`); 0 leaves it off.
    router_aux_loss_coef: float = 0.0
    # Sliding-window attention: a query sees the `sliding_window` latest keys (itself
    # included) on the layers whose `sliding_layers` entry is True; None: no window.
    sliding_window: Optional[int] = None
    sliding_layers: Optional[tuple] = None
    # gpt_oss: biases on q, k, v and o (config.json `attention_bias`; the released models: True).
    attention_bias: bool = True

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
        if self.reasoning_effort is not None and self.reasoning_effort not in REASONING_EFFORTS:
            raise ValueError(f"ModelConfig.reasoning_effort={self.reasoning_effort!r}; allowed: None or one of "
                             f"{REASONING_EFFORTS}")
        if not self.router_aux_loss_coef >= 0:
            raise ValueError(f"ModelConfig.router_aux_loss_coef={self.router_aux_loss_coef!r}; allowed: >= 0 "
                             "(0 = off)")
        for field in ("param_dtype", "dtype"):
            if getattr(self, field) not in DTYPES:
                raise ValueError(f"ModelConfig.{field}={getattr(self, field)!r}; allowed: {DTYPES}")
        if not isinstance(self.remat, bool) and self.remat not in REMAT_POLICIES:
            raise ValueError(f"ModelConfig.remat={self.remat!r}; allowed: True, False or one of {REMAT_POLICIES}")
        if not isinstance(self.scan_unroll, int) or not 1 <= self.scan_unroll <= self.num_layers:
            raise ValueError(f"ModelConfig.scan_unroll={self.scan_unroll!r}; allowed: an int in 1..num_layers="
                             f"{self.num_layers}")
        if self.moe_dispatch not in MOE_DISPATCH:
            raise ValueError(f"ModelConfig.moe_dispatch={self.moe_dispatch!r}; allowed: {MOE_DISPATCH}")
        if not isinstance(self.moe_chunk, int) or self.moe_chunk < 0:
            raise ValueError(f"ModelConfig.moe_chunk={self.moe_chunk!r}; allowed: an int >= 0 (0 = no chunking)")
        if self.family == "gpt_oss":
            if not 1 <= self.experts_per_token <= self.num_experts:
                raise ValueError(f"ModelConfig.experts_per_token={self.experts_per_token}; allowed: 1.."
                                 f"num_experts={self.num_experts} (gpt_oss is a mixture of experts)")
        elif self.num_experts:
            raise ValueError(f"ModelConfig.num_experts={self.num_experts}; only family 'gpt_oss' has experts")
        if self.sliding_window is not None:
            if self.family != "gpt_oss":
                raise ValueError(f"ModelConfig.sliding_window={self.sliding_window}; only family 'gpt_oss' has "
                                 "sliding-window layers (allowed: None)")
            if not isinstance(self.sliding_window, int) or self.sliding_window < 1:
                raise ValueError(f"ModelConfig.sliding_window={self.sliding_window!r}; allowed: None or an int >= 1")
            if self.sliding_layers is None or len(self.sliding_layers) != self.num_layers:
                raise ValueError(f"ModelConfig.sliding_layers={self.sliding_layers!r}; with sliding_window set it "
                                 f"must be a tuple of num_layers={self.num_layers} bools")
            object.__setattr__(self, "sliding_layers", tuple(bool(b) for b in self.sliding_layers))
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"ModelConfig.num_heads={self.num_heads} must be a multiple of "
                f"num_kv_heads={self.num_kv_heads} (grouped-query attention)")

    @property
    def qkv_bias(self) -> bool:
        return self.family == "qwen2" or (self.family == "gpt_oss" and self.attention_bias)

    @property
    def o_bias(self) -> bool:
        return self.family == "gpt_oss" and self.attention_bias

    @property
    def attn_sinks(self) -> bool:
        """A learned logit per head joins each softmax denominator (GPT-OSS)."""
        return self.family == "gpt_oss"

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    def layer_window(self, layer: int) -> Optional[int]:
        """The sliding window of layer `layer` (None: full attention)."""
        if self.sliding_window is None or not self.sliding_layers[layer]:
            return None
        return self.sliding_window

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
        attn += (d if self.o_bias else 0) + (self.num_heads if self.attn_sinks else 0)
        if self.is_moe:  # router (+ bias) and per-expert gate/up/down (+ biases)
            f, e = self.intermediate, self.num_experts
            mlp = d * e + e + e * (3 * d * f + 2 * f + d)
        else:
            mlp = 3 * d * self.intermediate
        layer = attn + mlp + 2 * d
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
    # GPT-OSS-20B (the V1 paper's main model), openai/gpt-oss-20b config.json: 24 layers, the
    # even ones on a 128-token sliding window; 32 experts, top-4; YaRN x32 over 4096 positions.
    # reasoning_effort: the harmony template's variable, "medium" as V1's released quick-start
    # runs it (also the template's own default); --config.model.overrides.reasoning_effort=high.
    # moe_chunk (ours): 2048 positions per expert dispatch in prefills and training rows.
    "gpt-oss-20b": ModelConfig("gpt_oss", 201088, 2880, 2880, 24, 64, 8, 64, rope_theta=150000.0,
                               rope_scaling=YarnScaling(factor=32.0, original_max_position=4096, beta_fast=32.0,
                                                        beta_slow=1.0, truncate=False),
                               rms_eps=1e-5, tie_embeddings=False, max_position=131072, num_experts=32,
                               experts_per_token=4, swiglu_limit=7.0, swiglu_alpha=1.702, sliding_window=128,
                               sliding_layers=tuple(i % 2 == 0 for i in range(24)), reasoning_effort="medium",
                               moe_chunk=2048),
}


def get_model_config(name: str, **overrides: Any) -> ModelConfig:
    """Named config, with field overrides (e.g. `dtype="bfloat16"`)."""
    if name not in NAMED_CONFIGS:
        raise ValueError(f"unknown model {name!r}; known models: {sorted(NAMED_CONFIGS)}")
    return NAMED_CONFIGS[name].replace(**overrides)


# A named config's settings that are not in a checkpoint's config.json: a checkpoint loaded
# under that name keeps them, so a run uses what `prd-jax compile` fitted (the named config).
NAMED_RUN_FIELDS = ("moe_chunk", "reasoning_effort", "enable_thinking")


def with_named_settings(name: str, loaded: ModelConfig) -> ModelConfig:
    """`loaded` (read from a checkpoint) with the NAMED_RUN_FIELDS of named config `name`
    (unchanged when `name` is not a named config)."""
    named = NAMED_CONFIGS.get(name)
    if named is None:
        return loaded
    return loaded.replace(**{f: getattr(named, f) for f in NAMED_RUN_FIELDS})


def from_hf_config(hf: dict) -> ModelConfig:
    """ModelConfig from a transformers `config.json` dict (llama, qwen2, qwen3 or gpt_oss)."""
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
    elif rope_type == "yarn":
        if rs.get("original_max_position_embeddings") is None:
            raise ValueError("config.json rope_scaling (rope_type yarn) is missing required key "
                             "'original_max_position_embeddings'")
        original = int(rs["original_max_position_embeddings"])
        factor = rs.get("factor")  # transformers: max_position_embeddings / original when absent
        factor = float(factor) if factor is not None else hf.get("max_position_embeddings", original) / original
        scaling = YarnScaling(
            factor=factor, original_max_position=original,
            beta_fast=float(rs.get("beta_fast") or 32.0), beta_slow=float(rs.get("beta_slow") or 1.0),
            truncate=bool(rs.get("truncate", True)),
            attention_factor=None if rs.get("attention_factor") is None else float(rs["attention_factor"]))
        if rs.get("mscale") or rs.get("mscale_all_dim"):
            raise ValueError("config.json rope_scaling: yarn mscale / mscale_all_dim are not supported")
    elif rope_type not in (None, "default"):
        raise ValueError(f"config.json rope_scaling.rope_type={rope_type!r}; supported: llama3, yarn, default")
    if model_type == "qwen2" and hf.get("use_sliding_window"):
        raise ValueError("config.json use_sliding_window=true is not supported; allowed: false")
    tie = hf.get("tie_word_embeddings", False)  # transformers' default for all four families
    extra = _gpt_oss_fields(hf) if model_type == "gpt_oss" else {}
    return ModelConfig(
        family=model_type,
        vocab_size=hf["vocab_size"],
        hidden=hf["hidden_size"],
        intermediate=hf["intermediate_size"],
        num_layers=hf["num_hidden_layers"],
        num_heads=heads,
        num_kv_heads=hf.get("num_key_value_heads") or heads,
        head_dim=hf.get("head_dim") or hf["hidden_size"] // heads,
        rope_theta=float(hf.get("rope_theta", rope_params.get("rope_theta", _DEFAULT_THETA.get(model_type, 10000.0)))),
        rope_scaling=scaling,
        rms_eps=float(hf.get("rms_norm_eps", 1e-6)),
        tie_embeddings=bool(tie),
        max_position=int(hf.get("max_position_embeddings", 8192)),
        **extra,
    )


LAYER_TYPES = ("sliding_attention", "full_attention")
_DEFAULT_THETA = {"gpt_oss": 150000.0}  # transformers' GptOssConfig.default_theta


def _gpt_oss_fields(hf: dict) -> dict:
    """The GPT-OSS keys of config.json: experts, the clamped SwiGLU and the layer types."""
    for key in ("num_local_experts", "num_experts_per_tok"):
        if key not in hf:
            raise ValueError(f"config.json (gpt_oss) is missing required key {key!r}")
    layers = hf["num_hidden_layers"]
    types = hf.get("layer_types") or [LAYER_TYPES[i % 2] for i in range(layers)]
    bad = [t for t in types if t not in LAYER_TYPES]
    if bad or len(types) != layers:
        raise ValueError(f"config.json layer_types={types!r}; allowed: {layers} entries from {LAYER_TYPES}")
    window = hf.get("sliding_window")
    sliding = tuple(t == "sliding_attention" for t in types)
    if window is None or not any(sliding):
        window, sliding = None, None
    return dict(attention_bias=bool(hf.get("attention_bias", True)), num_experts=int(hf["num_local_experts"]), experts_per_token=int(hf["num_experts_per_tok"]),
                swiglu_limit=float(hf.get("swiglu_limit", 7.0)), swiglu_alpha=float(hf.get("swiglu_alpha", 1.702)),
                sliding_window=None if window is None else int(window), sliding_layers=sliding)
