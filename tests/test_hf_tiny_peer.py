"""Peer check: tiny random transformers models saved as HF safetensors, loaded with
`prd_jax.model.load`, must give the same logits as transformers itself (fp32).

Covers Llama with llama3 RoPE scaling (untied head), Qwen2 (q/k/v bias, tied head),
Qwen3 (q/k RMSNorm, head_dim != hidden/heads), sharded checkpoints, bf16 checkpoints
and loading onto a (data, fsdp, tensor) mesh.

Checkpoints are written the way hub checkpoints ship them (top-level `rope_theta` and
`rope_scaling` in config.json). transformers 5 itself writes a `rope_parameters` block
instead; `test_transformers5_rope_parameters_config` checks that format too.
"""

from __future__ import annotations

import copy
import glob
import json
import math
import os

import numpy as np
import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

import jax  # noqa: E402

from prd_jax.mesh import make_mesh  # noqa: E402
from prd_jax.model import forward, load  # noqa: E402
from prd_jax.model.config import RopeScaling, from_hf_config  # noqa: E402

pytestmark = [pytest.mark.peer, pytest.mark.slow]

VOCAB = 300
COMMON = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6)
LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": 32}

# Family -> (config class, model class, config kwargs, seed).
SPECS = {
    # max_position_embeddings=128 with original 32: positions up to 111 are well past the
    # original context, and head_dim 16 / theta 5e4 puts rotary frequencies in all three
    # llama3 bands (unscaled, smoothly interpolated, divided by `factor`).
    "llama": ("LlamaConfig", "LlamaForCausalLM",
              dict(COMMON, num_hidden_layers=3, rope_theta=50000.0, rope_scaling=LLAMA3_SCALING,
                   max_position_embeddings=128, tie_word_embeddings=False), 0),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM",
              dict(COMMON, rope_theta=1e6, max_position_embeddings=256, tie_word_embeddings=True), 1),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM",
              dict(COMMON, head_dim=32, rope_theta=1e6, max_position_embeddings=256,
                   tie_word_embeddings=False), 2),
}

_jit_forward = jax.jit(forward, static_argnums=0, static_argnames=("mesh",))


# --------------------------------------------------------------------------- helpers

def _batches() -> list[tuple[np.ndarray, np.ndarray]]:
    """(tokens, positions) int32 pairs: a long prefill from 0 and a shorter offset batch."""
    rng = np.random.RandomState(1234)
    t1 = rng.randint(0, VOCAB, size=(2, 112)).astype(np.int32)
    p1 = np.broadcast_to(np.arange(112, dtype=np.int32), t1.shape).copy()
    t2 = rng.randint(0, VOCAB, size=(4, 24)).astype(np.int32)
    p2 = (np.arange(24, dtype=np.int32)[None, :] + np.array([[70], [0], [90], [33]], np.int32))
    return [(t1, p1), (t2, p2)]


BATCHES = _batches()


@torch.no_grad()
def _randomize(model: "torch.nn.Module", seed: int) -> None:
    """Weights big enough that every term matters: norms ~1+-0.3, biases ~0.3, W ~ 1/sqrt(fan_in)."""
    g = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():  # tied lm_head/embed is one parameter here
        noise = torch.randn(p.shape, generator=g, dtype=torch.float32)
        if p.ndim == 1:
            p.copy_(1.0 + 0.3 * noise if "norm" in name else 0.3 * noise)
        else:
            p.copy_(noise / math.sqrt(p.shape[1]))


def _build_model(family: str):
    cfg_cls, model_cls, kwargs, seed = SPECS[family]
    torch.manual_seed(seed)
    config = getattr(transformers, cfg_cls)(**kwargs)
    model = getattr(transformers, model_cls)(config)
    _randomize(model, seed)
    return model.eval()


def _hub_style_config(directory: str) -> dict:
    """Rewrite transformers-5 `rope_parameters` into hub-style `rope_theta` + `rope_scaling`."""
    path = os.path.join(directory, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    rope = dict(cfg.pop("rope_parameters", None) or {})
    if "rope_theta" in rope:
        cfg["rope_theta"] = rope.pop("rope_theta")
    if rope.get("rope_type", "default") != "default":
        cfg["rope_scaling"] = rope
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2)
    return cfg


def _save(model, directory: str, **kwargs) -> str:
    model.save_pretrained(directory, safe_serialization=True, **kwargs)
    _hub_style_config(directory)
    return directory


@torch.no_grad()
def _hf_logits(model, tokens: np.ndarray, positions: np.ndarray) -> np.ndarray:
    out = model(torch.from_numpy(tokens).long(), position_ids=torch.from_numpy(positions).long())
    return out.logits.float().numpy()


def _our_logits(lm, tokens: np.ndarray, positions: np.ndarray, mesh=None) -> np.ndarray:
    logits, _ = _jit_forward(lm.cfg, lm.params, tokens, positions, mesh=mesh)
    assert logits.dtype == np.float32
    return np.asarray(logits)


def _assert_matches(ours: np.ndarray, ref: np.ndarray, what: str) -> float:
    assert ours.shape == ref.shape, (what, ours.shape, ref.shape)
    scale = float(np.abs(ref).max())
    diff = float(np.abs(ours - ref).max())
    tol = max(1e-4, 1e-5 * scale)
    print(f"{what}: max|diff|={diff:.3e} max|logit|={scale:.3f} tol={tol:.1e}")
    assert diff < tol, f"{what}: max |ours - transformers| = {diff:.3e} >= {tol:.1e} (max |logit| {scale:.3f})"
    mismatched = int((ours.argmax(-1) != ref.argmax(-1)).sum())
    assert mismatched == 0, f"{what}: argmax differs at {mismatched} positions"
    return diff


# --------------------------------------------------------------------------- fixtures

class Peer:
    """One family: the transformers model, its saved checkpoint, and reference logits."""

    def __init__(self, family: str, root: str):
        self.family = family
        self.model = _build_model(family)
        self.dir = _save(self.model, os.path.join(root, family))
        self.ref = [_hf_logits(self.model, t, p) for t, p in BATCHES]
        self._lm = None

    @property
    def lm(self):
        if self._lm is None:
            self._lm = load("tiny", path=self.dir)
        return self._lm


@pytest.fixture(scope="module")
def peers(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("hf_tiny"))
    return {family: Peer(family, root) for family in SPECS}


# --------------------------------------------------------------------------- tests

@pytest.mark.parametrize("family", list(SPECS))
def test_logits_match_transformers(peers, family):
    peer = peers[family]
    lm = peer.lm
    assert lm.cfg.family == family
    assert lm.source == peer.dir
    for i, (tokens, positions) in enumerate(BATCHES):
        _assert_matches(_our_logits(lm, tokens, positions), peer.ref[i], f"{family} batch{i}")


def test_llama_config_and_scaling_matter(peers):
    """The llama3 scaling, rope_theta and untied head are read, and the test is sensitive to them."""
    peer = peers["llama"]
    cfg = peer.lm.cfg
    assert cfg.rope_scaling == RopeScaling(8.0, 1.0, 4.0, 32)
    assert cfg.rope_theta == 50000.0 and cfg.max_position == 128
    assert not cfg.tie_embeddings and "lm_head" in peer.lm.params
    # The head really is separate from the embedding table.
    head = peer.model.lm_head.weight.detach().numpy()
    np.testing.assert_array_equal(np.asarray(peer.lm.params["lm_head"]), head.T)
    assert not np.allclose(head, peer.model.model.embed_tokens.weight.detach().numpy())
    # Without the llama3 scaling, logits at the test positions are far off.
    unscaled = load("tiny", path=peer.dir, rope_scaling=None)
    tokens, positions = BATCHES[0]
    diff = np.abs(_our_logits(unscaled, tokens, positions) - peer.ref[0]).max()
    print(f"llama without llama3 scaling: max|diff|={diff:.3e}")
    assert diff > 1e-2, f"llama3 scaling has no visible effect at the test positions ({diff:.2e})"


def test_qwen2_bias_and_tied_head(peers):
    peer = peers["qwen2"]
    cfg, params = peer.lm.cfg, peer.lm.params
    assert cfg.qkv_bias and cfg.tie_embeddings and "lm_head" not in params
    assert cfg.rope_theta == 1e6
    attn = peer.model.model.layers[1].self_attn
    for ours, theirs in (("q_bias", attn.q_proj.bias), ("k_bias", attn.k_proj.bias),
                         ("v_bias", attn.v_proj.bias)):
        theirs = theirs.detach().numpy()
        assert np.abs(theirs).min() > 0, f"{ours} has zeros; randomisation failed"
        np.testing.assert_array_equal(np.asarray(params["layers"]["attn"][ours][1]).reshape(-1), theirs)
    files = glob.glob(os.path.join(peer.dir, "*.safetensors"))
    from safetensors import safe_open
    with safe_open(files[0], framework="pt") as f:
        assert "lm_head.weight" not in set(f.keys())  # tied: only the embedding is stored


def test_qwen3_qk_norm_and_head_dim(peers):
    peer = peers["qwen3"]
    cfg, params = peer.lm.cfg, peer.lm.params
    assert cfg.qk_norm and cfg.head_dim == 32 and cfg.head_dim != cfg.hidden // cfg.num_heads
    attn = peer.model.model.layers[0].self_attn
    for ours, theirs in (("q_norm", attn.q_norm.weight), ("k_norm", attn.k_norm.weight)):
        theirs = theirs.detach().numpy()
        assert theirs.shape == (32,) and np.abs(theirs - 1).max() > 0.1
        np.testing.assert_array_equal(np.asarray(params["layers"]["attn"][ours]["scale"][0]), theirs)


def test_sharded_checkpoint(peers, tmp_path):
    peer = peers["llama"]
    directory = _save(peer.model, str(tmp_path / "sharded"), max_shard_size="50KB")
    files = sorted(glob.glob(os.path.join(directory, "*.safetensors")))
    index = os.path.join(directory, "model.safetensors.index.json")
    assert len(files) > 1 and os.path.exists(index), files
    with open(index) as f:
        assert len(set(json.load(f)["weight_map"].values())) == len(files)
    lm = load("tiny", path=directory)
    same = jax.tree.map(lambda a, b: bool(np.array_equal(np.asarray(a), np.asarray(b))),
                        lm.params, peer.lm.params)
    assert all(jax.tree.leaves(same)), same
    for i, (tokens, positions) in enumerate(BATCHES):
        _assert_matches(_our_logits(lm, tokens, positions), peer.ref[i], f"llama sharded batch{i}")


def test_bf16_checkpoint(peers, tmp_path):
    peer = peers["qwen2"]
    directory = _save(copy.deepcopy(peer.model).to(torch.bfloat16), str(tmp_path / "bf16"))
    from safetensors import safe_open
    (path,) = glob.glob(os.path.join(directory, "*.safetensors"))
    with safe_open(path, framework="pt") as f:
        dtypes = {f.get_slice(k).get_dtype() for k in f.keys()}
    assert dtypes == {"BF16"}, dtypes
    ref_model = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    assert ref_model.model.embed_tokens.weight.dtype == torch.float32
    lm = load("tiny", path=directory)
    assert lm.params["embed"].dtype == np.float32  # upcast exactly
    np.testing.assert_array_equal(np.asarray(lm.params["embed"]),
                                  ref_model.model.embed_tokens.weight.detach().numpy())
    for i, (tokens, positions) in enumerate(BATCHES):
        _assert_matches(_our_logits(lm, tokens, positions), _hf_logits(ref_model, tokens, positions),
                        f"qwen2 bf16 batch{i}")


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_load_onto_mesh(peers, family):
    peer = peers[family]
    mesh = make_mesh("data=2,fsdp=2,tensor=2")
    lm = load("tiny", path=peer.dir, mesh=mesh)
    assert lm.mesh is mesh
    q = lm.params["layers"]["attn"]["q"]
    assert q.sharding.mesh == mesh and not q.sharding.is_fully_replicated
    assert len({s.device for s in q.addressable_shards}) == 8
    tokens, positions = BATCHES[1]  # batch 4: divisible by data*fsdp
    sharded = _our_logits(lm, tokens, positions, mesh=mesh)
    single = _our_logits(peer.lm, tokens, positions)
    np.testing.assert_allclose(sharded, single, rtol=0, atol=1e-5)
    print(f"{family} mesh vs single: max|diff|={np.abs(sharded - single).max():.3e}")
    _assert_matches(sharded, peer.ref[1], f"{family} mesh batch1")


def test_transformers5_rope_parameters_config(tmp_path):
    """config.json exactly as transformers 5 `save_pretrained` writes it."""
    cfg_cls, _, kwargs, _ = SPECS["llama"]
    config = getattr(transformers, cfg_cls)(**kwargs)
    config.save_pretrained(tmp_path)
    with open(tmp_path / "config.json") as f:
        raw = json.load(f)
    assert "rope_parameters" in raw and "rope_scaling" not in raw  # the format under test
    cfg = from_hf_config(raw)
    assert cfg.rope_theta == 50000.0
    assert cfg.rope_scaling == RopeScaling(8.0, 1.0, 4.0, 32)
