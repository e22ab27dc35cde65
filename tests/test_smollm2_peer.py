"""SmolLM2-135M-Instruct (the embedded GGUF) against HF transformers on the same file:
logits, top-5 and greedy 32-token continuations; plus the same logits on a (2,2,2) mesh."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prd_jax.mesh import make_mesh
from prd_jax.model import forward, load
from prd_jax.model.loader import smollm2_gguf_path
from prd_jax.model.weights import GGUFCheckpoint, load_params
from prd_jax.sampling import Sampler, SamplingConfig

pytestmark = [pytest.mark.peer, pytest.mark.slow]
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TEXTS = [
    "The capital of France is",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "Question: what is 37 + 48? Answer step by step.",
]


@pytest.fixture(scope="module")
def ours():
    return load("smollm2-135m")


@pytest.fixture(scope="module")
def hf_model():
    path = smollm2_gguf_path()
    model = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.dirname(path), gguf_file=os.path.basename(path), dtype=torch.float32)
    model.eval()
    model.generation_config.eos_token_id = None  # fixed-length greedy continuations
    return model


@pytest.fixture(scope="module")
def prompts(ours):
    tok = ours.tokenizer
    chat = tok.encode_chat([{"role": "user", "content": "Name three primary colours."}])
    return [tok.encode(t) for t in TEXTS] + [chat]


def hf_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].numpy()


def test_logits_match_transformers(ours, hf_model, prompts):
    for ids in prompts:
        ref = hf_logits(hf_model, ids)
        got, _ = forward(ours.cfg, ours.params, jnp.array([ids]), jnp.arange(len(ids))[None])
        got = np.asarray(got[0])
        scale = np.abs(ref).max()
        assert np.abs(got - ref).max() < 1e-3 * scale, (np.abs(got - ref).max(), scale)
        for pos in (len(ids) // 2, len(ids) - 1):
            assert np.argsort(-got[pos])[:5].tolist() == np.argsort(-ref[pos])[:5].tolist()


def test_greedy_continuations_match_transformers(ours, hf_model, prompts):
    sampler = Sampler(ours.cfg, pad_id=ours.tokenizer.pad_id)
    out = sampler(ours.params, prompts, jax.random.key(0), SamplingConfig(32, temperature=0.0))
    for row, ids in enumerate(prompts):
        with torch.no_grad():
            ref = hf_model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                    max_new_tokens=32, do_sample=False, pad_token_id=2)
        assert out.tokens[row].tolist() == ref[0, len(ids):].tolist()


def test_sharded_load_gives_same_logits(ours, prompts):
    mesh = make_mesh("data=2,fsdp=2,tensor=2")
    params = load_params(ours.cfg, GGUFCheckpoint(smollm2_gguf_path()), mesh)
    gate = params["layers"]["mlp"]["gate"]  # [30, 576, 1536] over fsdp x tensor
    assert {s.data.shape for s in gate.addressable_shards} == {(30, 288, 768)}
    ids = prompts[-1]
    fn = jax.jit(lambda p, t, q: forward(ours.cfg, p, t, q, mesh=mesh))
    tokens = jnp.array([ids] * 4)
    got, _ = fn(params, tokens, jnp.broadcast_to(jnp.arange(len(ids)), tokens.shape))
    ref, _ = forward(ours.cfg, ours.params, jnp.array([ids]), jnp.arange(len(ids))[None])
    got, ref = np.asarray(got[0]), np.asarray(ref[0])
    np.testing.assert_allclose(got, ref, atol=2e-4)
    assert (np.argmax(got, -1) == np.argmax(ref, -1)).all()
