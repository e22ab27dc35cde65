"""Weight import: GGUF (llama architecture, dequantised with `gguf`) and HF safetensors
(GPT-OSS's MXFP4 expert weights are dequantised as they are read, `prd_jax.model.mxfp4`).

Both readers expose tensors under HF transformers names and in HF layout
(`[out, in]` for linear weights); `load_params` converts them to the decoder's param
tree through the one HF name mapping (`prd_jax.model.hf_names`, which export uses too)
and places each one straight into its `NamedSharding` with `jax.make_array_from_callback`,
so a device only ever receives its own shard.
"""

from __future__ import annotations

import json
import os
from typing import Iterable, Optional

import gguf
import jax
import ml_dtypes
import numpy as np
from gguf.quants import dequantize
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from prd_jax.mesh import tree_shardings
from prd_jax.model.config import ModelConfig, RopeScaling
from prd_jax.model.decoder import param_logical_axes, param_shapes
from prd_jax.model.hf_names import PerLayer, param_builders
from prd_jax.model.mxfp4 import dequantize_expert_weight

# --------------------------------------------------------------------------- safetensors

_ST_DTYPES = {
    "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16, "F64": np.float64,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8,
    "BOOL": np.bool_,
}


class SafetensorsFile:
    """Zero-copy (memory-mapped) reader of one `.safetensors` file with validated offsets."""

    def __init__(self, path: str):
        self.path = path
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise ValueError(f"safetensors file {path}: shorter than its 8-byte header length")
            n = int.from_bytes(head, "little")
            if n <= 0 or 8 + n > size:
                raise ValueError(f"safetensors file {path}: header length {n} exceeds file size {size} "
                                 "(truncated or not a safetensors file)")
            try:
                header = json.loads(f.read(n))
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                raise ValueError(f"safetensors file {path}: header is not valid JSON ({e})") from None
        header.pop("__metadata__", None)
        self._data_start, self._data_size = 8 + n, size - 8 - n
        self._entries = {}
        for name, entry in header.items():
            dtype = entry.get("dtype")
            if dtype not in _ST_DTYPES:
                raise ValueError(f"safetensors file {path}: tensor {name!r} has dtype {dtype!r}; "
                                 f"supported: {sorted(_ST_DTYPES)}")
            begin, end = entry["data_offsets"]
            shape = tuple(entry["shape"])
            expected = int(np.prod(shape, dtype=np.int64)) * np.dtype(_ST_DTYPES[dtype]).itemsize
            if end - begin != expected:
                raise ValueError(f"safetensors file {path}: tensor {name!r} spans {end - begin} bytes, "
                                 f"shape {shape} {dtype} needs {expected}")
            if end > self._data_size:
                raise ValueError(f"safetensors file {path}: tensor {name!r} ends at byte {end} but the "
                                 f"data section has {self._data_size} bytes (file truncated?)")
            self._entries[name] = (_ST_DTYPES[dtype], shape, begin)
        self._mmap = np.memmap(path, dtype=np.uint8, mode="r")

    def keys(self) -> Iterable[str]:
        return self._entries.keys()

    def get(self, name: str) -> np.ndarray:
        dtype, shape, begin = self._entries[name]
        count = int(np.prod(shape, dtype=np.int64))
        return np.frombuffer(self._mmap, dtype=dtype, count=count,
                             offset=self._data_start + begin).reshape(shape)


class HFCheckpoint:
    """All tensors of a local HF model directory (single or sharded `*.safetensors`)."""

    def __init__(self, directory: str):
        self.directory = directory
        index = os.path.join(directory, "model.safetensors.index.json")
        if os.path.exists(index):
            with open(index) as f:
                files = sorted(set(json.load(f)["weight_map"].values()))
        else:
            files = sorted(f for f in os.listdir(directory) if f.endswith(".safetensors"))
        if not files:
            raise FileNotFoundError(f"no *.safetensors files in {directory}")
        self._where: dict[str, SafetensorsFile] = {}
        for name in files:
            st = SafetensorsFile(os.path.join(directory, name))
            for key in st.keys():
                self._where[key] = st

    def get(self, name: str) -> np.ndarray:
        """The tensor `name`; an MXFP4 pair `name_blocks` / `name_scales` comes back
        dequantised to fp32 in the dense layout (`mxfp4.dequantize_expert_weight`)."""
        if name not in self._where and self._is_mxfp4(name):
            blocks, scales = name + "_blocks", name + "_scales"
            return dequantize_expert_weight(self._where[blocks].get(blocks), self._where[scales].get(scales))
        if name not in self._where:
            raise ValueError(f"checkpoint {self.directory}: tensor {name!r} not found "
                             f"(has {len(self._where)} tensors, e.g. {sorted(self._where)[:3]})")
        return self._where[name].get(name)

    def _is_mxfp4(self, name: str) -> bool:
        return name + "_blocks" in self._where and name + "_scales" in self._where

    def __contains__(self, name: str) -> bool:
        return name in self._where or self._is_mxfp4(name)


def read_hf_config(directory: str) -> dict:
    path = os.path.join(directory, "config.json")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{directory} has no config.json; expected a local HF model directory")
    with open(path) as f:
        return json.load(f)


# --------------------------------------------------------------------------- GGUF

_GGUF_LAYER_NAMES = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
_GGUF_TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm",
                   "output": "lm_head"}


def _gguf_to_hf_name(name: str) -> str:
    stem, _, suffix = name.rpartition(".")
    if stem.startswith("blk."):
        _, idx, part = stem.split(".", 2)
        if part not in _GGUF_LAYER_NAMES:
            raise ValueError(f"GGUF tensor {name!r} is not supported")
        return f"model.layers.{idx}.{_GGUF_LAYER_NAMES[part]}.{suffix}"
    if stem not in _GGUF_TOP_NAMES:
        raise ValueError(f"GGUF tensor {name!r} is not supported")
    return f"{_GGUF_TOP_NAMES[stem]}.{suffix}"


def _unpermute_rope_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's q/k row permutation (interleaved RoPE pairs -> HF half-split)."""
    rows = w.shape[0]
    return w.reshape(n_heads, rows // n_heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _checked_gguf_reader(path: str):
    """A `GGUFReader` that names the first tensor whose data lies past the end of the file."""
    class Reader(gguf.GGUFReader):
        def _build_tensors(self, start_offs, fields):
            for field in fields:
                _, name, _, dims, raw_type, offset = field.parts
                block, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(int(raw_type[0]))]
                end = int(start_offs + offset[0]) + int(np.prod(dims)) * type_size // block
                if end > len(self.data):
                    raise ValueError(f"GGUF file {path}: tensor {bytes(name).decode()!r} extends past "
                                     f"the end of the file ({end} > {len(self.data)} bytes; truncated?)")
            super()._build_tensors(start_offs, fields)

    return Reader(path)


class GGUFCheckpoint:
    """Tensors of a llama-architecture GGUF file, dequantised to fp32 under HF names."""

    def __init__(self, path: str):
        if not os.path.exists(path):
            raise FileNotFoundError(f"GGUF file {path} does not exist")
        self.path = path
        try:
            self.reader = _checked_gguf_reader(path)
        except ValueError as e:
            if str(e).startswith("GGUF file"):
                raise
            raise ValueError(f"GGUF file {path} is malformed or truncated: {e}") from None
        except Exception as e:  # the reader raises assorted errors on damaged files
            raise ValueError(f"GGUF file {path} is malformed or truncated: {type(e).__name__}: {e}") from None
        arch = self.field("general.architecture")
        if arch != "llama":
            raise ValueError(f"GGUF file {path}: general.architecture={arch!r}; supported: 'llama'")
        size = os.path.getsize(path)
        self._tensors = {}
        for t in self.reader.tensors:
            if t.data_offset + t.n_bytes > size:
                raise ValueError(f"GGUF file {path}: tensor {t.name!r} extends past the end of the "
                                 f"file ({t.data_offset + t.n_bytes} > {size} bytes; truncated?)")
            self._tensors[_gguf_to_hf_name(t.name)] = t
        self.config = self._config()

    def field(self, key: str, default=None):
        f = self.reader.fields.get(key)
        return default if f is None else f.contents()

    def _config(self) -> ModelConfig:
        def need(key):
            value = self.field(key)
            if value is None:
                raise ValueError(f"GGUF file {self.path}: metadata key {key!r} missing")
            return value

        heads = int(need("llama.attention.head_count"))
        hidden = int(need("llama.embedding_length"))
        vocab = self.field("llama.vocab_size") or len(need("tokenizer.ggml.tokens"))
        scaling = None
        if self.field("llama.rope.scaling.type") == "llama3":  # pragma: no cover - rare in GGUF
            scaling = RopeScaling(float(need("llama.rope.scaling.factor")))
        return ModelConfig(
            family="llama", vocab_size=int(vocab), hidden=hidden,
            intermediate=int(need("llama.feed_forward_length")),
            num_layers=int(need("llama.block_count")), num_heads=heads,
            num_kv_heads=int(self.field("llama.attention.head_count_kv", heads)),
            head_dim=int(self.field("llama.rope.dimension_count", hidden // heads)),
            rope_theta=float(self.field("llama.rope.freq_base", 10000.0)), rope_scaling=scaling,
            rms_eps=float(need("llama.attention.layer_norm_rms_epsilon")),
            tie_embeddings="lm_head.weight" not in self._tensors,
            max_position=int(self.field("llama.context_length", 8192)))

    def __contains__(self, name: str) -> bool:
        return name in self._tensors

    def get(self, name: str) -> np.ndarray:
        if name not in self._tensors:
            raise ValueError(f"GGUF file {self.path}: tensor for {name!r} not found")
        t = self._tensors[name]
        shape = tuple(int(s) for s in reversed(t.shape))  # GGML lists dims innermost-first
        try:
            w = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(shape)
        except (NotImplementedError, ValueError) as e:
            raise ValueError(f"GGUF file {self.path}: tensor {t.name!r} of type "
                             f"{t.tensor_type.name} cannot be dequantised: {e}") from None
        if name.endswith("q_proj.weight"):
            w = _unpermute_rope_rows(w, self.config.num_heads)
        elif name.endswith("k_proj.weight"):
            w = _unpermute_rope_rows(w, self.config.num_kv_heads)
        return w


# --------------------------------------------------------------------------- conversion

def param_shardings(cfg: ModelConfig, mesh: Optional[Mesh]):
    """NamedShardings for the param tree by the logical rules (replicated on one device)."""
    if mesh is None:
        mesh = Mesh(np.array(jax.devices()[:1]).reshape(1, 1, 1), ("data", "fsdp", "tensor"))
    shapes = jax.tree.map(lambda s: s.shape, param_shapes(cfg))
    return tree_shardings(param_logical_axes(cfg), shapes, mesh)


def load_params(cfg: ModelConfig, checkpoint, mesh: Optional[Mesh] = None):
    """Build the param tree from a checkpoint (HFCheckpoint / GGUFCheckpoint) into shardings."""
    shapes = param_shapes(cfg)
    shardings = param_shardings(cfg, mesh)
    getters = param_builders(cfg, checkpoint.get)

    def place(thunk, spec: jax.ShapeDtypeStruct, sharding: NamedSharding, path):
        if isinstance(thunk, PerLayer):  # one layer on the host at a time, stacked on device
            return _place_per_layer(thunk, spec, sharding, jax.tree_util.keystr(path))
        host = thunk()
        name = jax.tree_util.keystr(path)
        if host.shape != spec.shape:
            raise ValueError(f"checkpoint tensor for param {name}: shape {host.shape}, "
                             f"model config expects {spec.shape}")
        host = np.asarray(host, dtype=spec.dtype)
        return jax.make_array_from_callback(spec.shape, sharding, lambda idx: host[idx])

    return jax.tree_util.tree_map_with_path(
        lambda path, thunk, spec, sh: place(thunk, spec, sh, path), getters, shapes, shardings)


def _place_per_layer(layers: "PerLayer", spec: jax.ShapeDtypeStruct, sharding: NamedSharding, name: str):
    """A stacked `[L, ...]` leaf read layer by layer: each layer is cast to the param dtype and
    placed with the leaf's sharding less its layer axis, then the layers are stacked on device,
    so the host holds one layer's tensor (e.g. one dequantised MXFP4 expert weight) at a time."""
    layer_sharding = NamedSharding(sharding.mesh, PartitionSpec(*tuple(sharding.spec)[1:]))
    placed = []
    for i in range(layers.num_layers):
        host = np.asarray(layers.read(i), dtype=spec.dtype)
        if host.shape != spec.shape[1:]:
            raise ValueError(f"checkpoint tensor for param {name} layer {i}: shape {host.shape}, "
                             f"model config expects {spec.shape[1:]}")
        placed.append(jax.make_array_from_callback(host.shape, layer_sharding, lambda idx, h=host: h[idx]))
        del host
    return jax.jit(lambda *xs: jax.numpy.stack(xs), out_shardings=sharding)(*placed)
