"""The one mapping between HF transformers tensors and our decoder's param tree.

Both directions use it: import (`prd_jax.model.weights.load_params`, HF safetensors and
GGUF read under HF names) and export (`prd_jax.checkpoint.export_hf`). A new model family
touches only `prd_jax.model`: its config fields, the decoder, and the rows of `tensor_maps`
(plus `ARCHITECTURES` / `hf_config` for the exported `config.json`).

One row (`TensorMap`) per leaf of our param tree. Layer leaves are stacked along a leading
`[L]` axis (the decoder scans its layers); their HF name has a `{layer}` slot. The layout
change between HF (`[out, in]` linear weights, flat head dims) and ours (`[in, out]`, split
head dims) is "transpose or not, then reshape", so one flag and two shapes describe it:

    ours = reshape(transpose?(hf), param_shape)      hf = transpose?(reshape(ours, ...))
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, Iterator, Tuple

import numpy as np

from prd_jax.model.config import ModelConfig, YarnScaling

LAYER = "{layer}"
ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
                 "gpt_oss": "GptOssForCausalLM"}


@dataclasses.dataclass(frozen=True)
class TensorMap:
    """One param leaf <-> one HF tensor per layer (or one tensor for top-level leaves).

    `param_path`: keys into our param tree, e.g. ("layers", "attn", "q").
    `hf_name`: HF tensor name; contains `{layer}` when `per_layer`.
    `hf_shape`: the HF-layout shape of one tensor (one layer's).
    `param_shape`: our shape of one layer's slice (the stacked leaf is `[L, *param_shape]`).
    `transpose`: HF stores the matrix transposed (`[out, in]`).
    """

    param_path: Tuple[str, ...]
    hf_name: str
    hf_shape: Tuple[int, ...]
    param_shape: Tuple[int, ...]
    transpose: bool = False

    @property
    def per_layer(self) -> bool:
        return LAYER in self.hf_name

    def name(self, layer: int = 0) -> str:
        """The HF tensor name (of layer `layer` for a per-layer row)."""
        return self.hf_name.replace(LAYER, str(layer))

    def to_param(self, hf: np.ndarray) -> np.ndarray:
        """HF layout -> our layout (one layer's slice)."""
        hf = np.asarray(hf)
        return (hf.T if self.transpose else hf).reshape(self.param_shape)

    def to_hf(self, ours: np.ndarray) -> np.ndarray:
        """Our layout (one layer's slice) -> HF layout."""
        ours = np.asarray(ours)
        if self.transpose:
            return ours.reshape(self.hf_shape[::-1]).T
        return ours.reshape(self.hf_shape)


def tensor_maps(cfg: ModelConfig) -> Tuple[TensorMap, ...]:
    """Every param leaf of `cfg`'s decoder with its HF tensor (Llama / Qwen2 / Qwen3 / GPT-OSS).

    Qwen2 adds q/k/v biases, Qwen3 per-head q/k RMSNorm; a tied head has no `lm_head` row
    (the decoder reuses `embed`, and transformers ties `lm_head.weight` to it). GPT-OSS adds
    q/k/v/o biases, the per-head `sinks`, and a router + stacked experts in place of the MLP
    (the experts are stored `[E, in, out]` in both layouts; `gate_up_proj` keeps its
    interleaved gate/up columns, `prd_jax.model.moe`).
    """
    n, k, h, d, f, v = (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.hidden,
                        cfg.intermediate, cfg.vocab_size)
    pre = f"model.layers.{LAYER}."
    rows = [
        TensorMap(("embed",), "model.embed_tokens.weight", (v, d), (v, d)),
        TensorMap(("final_norm", "scale"), "model.norm.weight", (d,), (d,)),
        TensorMap(("layers", "attn", "q"), pre + "self_attn.q_proj.weight", (n * h, d), (d, n, h), True),
        TensorMap(("layers", "attn", "k"), pre + "self_attn.k_proj.weight", (k * h, d), (d, k, h), True),
        TensorMap(("layers", "attn", "v"), pre + "self_attn.v_proj.weight", (k * h, d), (d, k, h), True),
        TensorMap(("layers", "attn", "o"), pre + "self_attn.o_proj.weight", (d, n * h), (n, h, d), True),
    ]
    if cfg.qkv_bias:
        rows += [
            TensorMap(("layers", "attn", "q_bias"), pre + "self_attn.q_proj.bias", (n * h,), (n, h)),
            TensorMap(("layers", "attn", "k_bias"), pre + "self_attn.k_proj.bias", (k * h,), (k, h)),
            TensorMap(("layers", "attn", "v_bias"), pre + "self_attn.v_proj.bias", (k * h,), (k, h)),
        ]
    if cfg.o_bias:
        rows.append(TensorMap(("layers", "attn", "o_bias"), pre + "self_attn.o_proj.bias", (d,), (d,)))
    if cfg.attn_sinks:
        rows.append(TensorMap(("layers", "attn", "sinks"), pre + "self_attn.sinks", (n,), (n,)))
    if cfg.qk_norm:
        rows += [
            TensorMap(("layers", "attn", "q_norm", "scale"), pre + "self_attn.q_norm.weight", (h,), (h,)),
            TensorMap(("layers", "attn", "k_norm", "scale"), pre + "self_attn.k_norm.weight", (h,), (h,)),
        ]
    rows += [
        TensorMap(("layers", "attn_norm", "scale"), pre + "input_layernorm.weight", (d,), (d,)),
        TensorMap(("layers", "mlp_norm", "scale"), pre + "post_attention_layernorm.weight", (d,), (d,)),
    ]
    if cfg.is_moe:
        e, ex = cfg.num_experts, pre + "mlp.experts."
        rows += [
            TensorMap(("layers", "mlp", "router"), pre + "mlp.router.weight", (e, d), (d, e), True),
            TensorMap(("layers", "mlp", "router_bias"), pre + "mlp.router.bias", (e,), (e,)),
            TensorMap(("layers", "mlp", "gate_up"), ex + "gate_up_proj", (e, d, 2 * f), (e, d, 2 * f)),
            TensorMap(("layers", "mlp", "gate_up_bias"), ex + "gate_up_proj_bias", (e, 2 * f), (e, 2 * f)),
            TensorMap(("layers", "mlp", "down"), ex + "down_proj", (e, f, d), (e, f, d)),
            TensorMap(("layers", "mlp", "down_bias"), ex + "down_proj_bias", (e, d), (e, d)),
        ]
    else:
        rows += [
            TensorMap(("layers", "mlp", "gate"), pre + "mlp.gate_proj.weight", (f, d), (d, f), True),
            TensorMap(("layers", "mlp", "up"), pre + "mlp.up_proj.weight", (f, d), (d, f), True),
            TensorMap(("layers", "mlp", "down"), pre + "mlp.down_proj.weight", (d, f), (f, d), True),
        ]
    if not cfg.tie_embeddings:
        rows.append(TensorMap(("lm_head",), "lm_head.weight", (v, d), (d, v), True))
    return tuple(rows)


def hf_shapes(cfg: ModelConfig) -> Dict[str, Tuple[int, ...]]:
    """Every HF tensor name of `cfg` (layers expanded) -> its HF-layout shape."""
    return {name: m.hf_shape for m, name in _expanded(cfg)}


def _expanded(cfg: ModelConfig) -> Iterator[Tuple[TensorMap, str]]:
    for m in tensor_maps(cfg):
        for layer in (range(cfg.num_layers) if m.per_layer else (0,)):
            yield m, m.name(layer)


def _set(tree: dict, path: Tuple[str, ...], value) -> None:
    for key in path[:-1]:
        tree = tree.setdefault(key, {})
    tree[path[-1]] = value


def _get(tree, path: Tuple[str, ...]):
    for key in path:
        tree = tree[key]
    return tree


@dataclasses.dataclass(frozen=True)
class PerLayer:
    """A stacked leaf to be read one layer at a time: `read(i)` is layer i in our layout
    (the mixture-of-experts weights, whose stack would not fit a host at once)."""

    read: Callable[[int], np.ndarray]
    num_layers: int

    def __call__(self) -> np.ndarray:
        return np.stack([self.read(i) for i in range(self.num_layers)])


def param_builders(cfg: ModelConfig, read: Callable[[str], np.ndarray]) -> dict:
    """Our param tree with one thunk per leaf that reads its HF tensor(s) via `read(name)`
    (HF layout) and returns the leaf in our layout (layers stacked). A tensor whose shape
    differs from the one `cfg` implies raises, naming the tensor and both shapes. The expert
    weights' thunks are `PerLayer` (callable too), so a loader can place them layer by layer.
    """

    def get(m: TensorMap, layer: int) -> np.ndarray:
        name = m.name(layer)
        w = read(name)
        if tuple(w.shape) != m.hf_shape:
            raise ValueError(f"checkpoint tensor {name!r}: shape {tuple(w.shape)}, "
                             f"model config expects {m.hf_shape}")
        return m.to_param(w)

    def thunk(m: TensorMap):
        if m.per_layer and m.param_path[-1] in ("gate_up", "down") and cfg.is_moe:
            return PerLayer(lambda i: get(m, i), cfg.num_layers)
        if m.per_layer:
            return lambda: np.stack([get(m, i) for i in range(cfg.num_layers)])
        return lambda: get(m, 0)

    tree: dict = {}
    for m in tensor_maps(cfg):
        _set(tree, m.param_path, thunk(m))
    return tree


def to_hf_tensors(cfg: ModelConfig, params) -> Dict[str, np.ndarray]:
    """Our param tree (host arrays) as HF-named arrays in HF layout."""
    out = {}
    for m in tensor_maps(cfg):
        leaf = np.asarray(_get(params, m.param_path))
        if m.per_layer:
            for i in range(cfg.num_layers):
                out[m.name(i)] = m.to_hf(leaf[i])
        else:
            out[m.name()] = m.to_hf(leaf)
    return out


def hf_config(cfg: ModelConfig, dtype: str = "float32") -> dict:
    """transformers `config.json` for `cfg` (LlamaForCausalLM / Qwen2ForCausalLM /
    Qwen3ForCausalLM / GptOssForCausalLM); `prd_jax.model.config.from_hf_config` reads it
    back to `cfg`."""
    out = {
        "architectures": [ARCHITECTURES[cfg.family]], "model_type": cfg.family,
        "vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden,
        "intermediate_size": cfg.intermediate, "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads, "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim, "hidden_act": "silu", "max_position_embeddings": cfg.max_position,
        "rms_norm_eps": cfg.rms_eps, "rope_theta": cfg.rope_theta, "rope_scaling": None,
        "tie_word_embeddings": cfg.tie_embeddings, "torch_dtype": dtype, "use_cache": True,
    }
    if cfg.family in ("llama", "qwen3"):
        out["attention_bias"] = False
    if cfg.family == "llama":
        out["mlp_bias"] = False
    elif cfg.family == "gpt_oss":
        out.update(_gpt_oss_config(cfg))
    else:
        out["use_sliding_window"] = False
    if isinstance(cfg.rope_scaling, YarnScaling):
        s = cfg.rope_scaling
        out["rope_scaling"] = {"rope_type": "yarn", "factor": s.factor, "beta_fast": s.beta_fast,
                               "beta_slow": s.beta_slow, "truncate": s.truncate,
                               "original_max_position_embeddings": s.original_max_position}
        if s.attention_factor is not None:
            out["rope_scaling"]["attention_factor"] = s.attention_factor
    elif cfg.rope_scaling is not None:
        s = cfg.rope_scaling
        out["rope_scaling"] = {"rope_type": "llama3", "factor": s.factor,
                               "low_freq_factor": s.low_freq_factor,
                               "high_freq_factor": s.high_freq_factor,
                               "original_max_position_embeddings": s.original_max_position}
    return out


def _gpt_oss_config(cfg: ModelConfig) -> dict:
    """The GPT-OSS keys of config.json (experts, clamped SwiGLU, layer types, biases)."""
    sliding = cfg.sliding_layers or (False,) * cfg.num_layers
    return {"attention_bias": cfg.attention_bias, "num_local_experts": cfg.num_experts,
            "num_experts_per_tok": cfg.experts_per_token, "swiglu_limit": cfg.swiglu_limit,
            "swiglu_alpha": cfg.swiglu_alpha, "sliding_window": cfg.sliding_window,
            "layer_types": ["sliding_attention" if s else "full_attention" for s in sliding]}
