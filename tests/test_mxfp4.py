"""MXFP4 expert weights (the released GPT-OSS checkpoints' format) and bf16 GPT-OSS checkpoints.

A tiny GPT-OSS checkpoint is written in the official MXFP4 layout (`*_blocks [E, out, in/32,
16]` uint8, two E2M1 codes per byte, low nibble first; `*_scales [E, out, in/32]` uint8 E8M0
exponents, value = code * 2**(scale - 127)); `prd_jax.model.load` must dequantise it to the
weights that `reference_dequantize` below (written from that description, by bit fields)
gives, and to the logits transformers computes from the same file.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import jax

from prd_jax.model import forward, load
from prd_jax.model.mxfp4 import dequantize_rows


def _e2m1(code: np.ndarray) -> np.ndarray:
    """E2M1 by its bit fields: sign (bit 3), exponent (bits 2-1, bias 1), mantissa (bit 0);
    exponent 0 is subnormal (0 or 0.5)."""
    sign = np.where(code & 0b1000, -1.0, 1.0)
    exp, man = (code >> 1) & 0b11, code & 1
    mag = np.where(exp == 0, 0.5 * man, 2.0 ** (exp.astype(np.float64) - 1) * (1 + 0.5 * man))
    return sign * mag


def reference_dequantize(blocks: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """`W [E, in, out]` element by element: in-feature i of output row o of expert e is nibble
    i % 2 (0 = low) of byte (i % 32) // 2 of block i // 32, times 2**(scale - 127)."""
    e, out, groups, _ = blocks.shape
    w = np.zeros((e, groups * 32, out), np.float64)
    for i in range(groups * 32):
        byte = blocks[:, :, i // 32, (i % 32) // 2]
        code = byte & 0x0F if i % 2 == 0 else byte >> 4
        w[:, i, :] = _e2m1(code) * 2.0 ** (scales[:, :, i // 32].astype(np.float64) - 127)
    return w


def test_dequantize_rows_hand_values():
    # one block: byte 0 = 0x21 -> codes (1, 2) = (0.5, 1.0); byte 1 = 0xF7 -> (7, 15) = (6.0, -6.0);
    # the rest 0x80 -> (+0, -0). Scale 128 doubles every value.
    block = np.full((1, 16), 0x80, np.uint8)
    block[0, 0], block[0, 1] = 0x21, 0xF7
    got = dequantize_rows(block, np.array([128], np.uint8))
    assert got.shape == (32,)
    assert got[:4].tolist() == [1.0, 2.0, 12.0, -12.0]
    assert np.all(got[4:] == 0) and np.signbit(got[5])  # the high nibble 8 is -0.0
    with pytest.raises(ValueError, match="expected"):
        dequantize_rows(block[:, :8], np.array([128], np.uint8))


transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")


def _tiny_hf(out: str, dtype=None):
    # hidden and intermediate are multiples of 32 (one MXFP4 block per 32 input features)
    cfg = transformers.GptOssConfig(
        vocab_size=200, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2, sliding_window=6,
        max_position_embeddings=256, tie_word_embeddings=False,
        rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 8.0, "beta_fast": 32.0,
                         "beta_slow": 1.0, "truncate": False, "original_max_position_embeddings": 32})
    torch.manual_seed(3)
    model = transformers.GptOssForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn(p.shape) * (0.3 if p.ndim == 1 else 1 / p.shape[-1] ** 0.5) + ("norm" in name))
    if dtype is not None:
        model = model.to(dtype)
    model.save_pretrained(out)
    return model


@pytest.fixture(scope="module")
def mxfp4_dir(tmp_path_factory):
    """A tiny checkpoint with its expert weights replaced by random MXFP4 blocks / scales."""
    from safetensors.numpy import load_file, save_file

    out = str(tmp_path_factory.mktemp("mxfp4"))
    _tiny_hf(out)
    path = os.path.join(out, "model.safetensors")
    tensors, quantized = load_file(path), {}
    rng = np.random.RandomState(0)
    for name in list(tensors):
        if name.endswith(("experts.gate_up_proj", "experts.down_proj")):
            e, fan_in, fan_out = tensors.pop(name).shape
            blocks = rng.randint(0, 256, (e, fan_out, fan_in // 32, 16)).astype(np.uint8)
            scales = rng.randint(121, 127, (e, fan_out, fan_in // 32)).astype(np.uint8)
            tensors[name + "_blocks"], tensors[name + "_scales"] = blocks, scales
            quantized[name] = (blocks, scales)
    save_file(tensors, path)
    with open(os.path.join(out, "config.json")) as f:
        config = json.load(f)
    config["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f)
    return out, quantized


@pytest.mark.parametrize("param_dtype", ["float32", "bfloat16"])
@pytest.mark.slow
def test_mxfp4_load_equals_reference(mxfp4_dir, param_dtype):
    """Every expert weight of every layer equals the reference dequantiser's (exactly: E2M1
    values times powers of two are exact in fp32 and bf16)."""
    path, quantized = mxfp4_dir
    ours = load("gpt-oss-mxfp4", path, param_dtype=param_dtype)
    mlp = ours.params["layers"]["mlp"]
    for name, (blocks, scales) in quantized.items():
        layer = int(name.split(".")[2])
        leaf = mlp["gate_up" if name.endswith("gate_up_proj") else "down"]
        assert leaf.dtype == np.dtype(param_dtype)
        np.testing.assert_array_equal(np.asarray(leaf[layer], np.float64), reference_dequantize(blocks, scales))


@pytest.mark.peer
@pytest.mark.slow
def test_mxfp4_logits_match_transformers(mxfp4_dir):
    """transformers dequantising the same file (`Mxfp4Config(dequantize=True)`) gives our logits."""
    path, _ = mxfp4_dir
    hf = transformers.GptOssForCausalLM.from_pretrained(
        path, quantization_config=transformers.Mxfp4Config(dequantize=True), dtype=torch.float32).eval()
    ours = load("gpt-oss-mxfp4", path)
    tokens = np.random.RandomState(1).randint(0, 200, (2, 20)).astype(np.int32)
    with torch.no_grad():
        ref = hf(torch.tensor(tokens, dtype=torch.long)).logits.numpy()
    got, _ = jax.jit(forward, static_argnums=0)(ours.cfg, ours.params, tokens,
                                                 np.broadcast_to(np.arange(20, dtype=np.int32), tokens.shape))
    assert np.abs(np.asarray(got) - ref).max() < 1e-4 * max(1.0, np.abs(ref).max())


@pytest.mark.peer
def test_bf16_checkpoint_loads(tmp_path):
    """A bf16 GPT-OSS checkpoint loads bit for bit (experts, router, sinks, biases)."""
    model = _tiny_hf(str(tmp_path), dtype=torch.bfloat16)
    ours = load("gpt-oss-bf16", str(tmp_path), param_dtype="bfloat16")
    layer = model.model.layers[1]
    pairs = {("mlp", "gate_up"): layer.mlp.experts.gate_up_proj, ("mlp", "down_bias"): layer.mlp.experts.down_proj_bias,
             ("mlp", "router"): layer.mlp.router.weight.T, ("attn", "sinks"): layer.self_attn.sinks,
             ("attn", "o_bias"): layer.self_attn.o_proj.bias}
    for (block, name), ref in pairs.items():
        got = np.asarray(ours.params["layers"][block][name][1], np.float32)
        np.testing.assert_array_equal(got, ref.detach().float().numpy())
