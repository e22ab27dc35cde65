"""Peer check of the GPT-OSS decoder against transformers' `GptOssForCausalLM` (fp32).

Tiny random GPT-OSS models (a few layers and experts, sliding windows of 5-8 tokens, YaRN
RoPE) are saved with `save_pretrained`, loaded with `prd_jax.model.load`, and must give
transformers' logits within 1e-4 on prompts longer than the window, the same greedy tokens
through the sampler (prefill + cached decode, ragged batch) and through
`prd-jax generate --path DIR --temperature 0 --json` (both decode sliding-window layers from
window-sized ring caches), the same logits under the grouped
(`ragged_dot`) and the dense all-experts dispatch, and the same greedy tokens on 8 simulated
devices with the `expert` axis sharded as on one device; an export to HF safetensors (bf16)
loads back in both libraries with equal logits. Nothing depends on a particular
size: every check reads the shapes from the model it is given.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from prd_jax import cli  # noqa: E402
from prd_jax.checkpoint import export_hf  # noqa: E402
from prd_jax.mesh import make_mesh  # noqa: E402
from prd_jax.model import forward, load  # noqa: E402
from prd_jax.model.config import YarnScaling, from_hf_config  # noqa: E402
from prd_jax.model.hf_names import hf_config  # noqa: E402
from prd_jax.sampling import Sampler, SamplingConfig  # noqa: E402

pytestmark = pytest.mark.peer

# name -> GptOssConfig kwargs. "yarn_gqa": grouped-query heads, YaRN without truncation (as the
# released model), windows on layers 0 and 2; "mha_full_first": no GQA, YaRN with truncation,
# a full-attention first layer, top-3 of 4 experts, no q/k/v/o biases.
CONFIGS = {
    "yarn_gqa": dict(vocab_size=300, hidden_size=64, intermediate_size=48, num_hidden_layers=3,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=6,
                     num_experts_per_tok=2, sliding_window=5, max_position_embeddings=128,
                     rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                      "beta_fast": 8.0, "beta_slow": 1.0, "truncate": False,
                                      "original_max_position_embeddings": 32}),
    "mha_full_first": dict(vocab_size=280, hidden_size=48, intermediate_size=32, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=4, head_dim=8, num_local_experts=4,
                           num_experts_per_tok=3, sliding_window=8, max_position_embeddings=128,
                           layer_types=["full_attention", "sliding_attention"], attention_bias=False,
                           rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 2.0,
                                            "beta_fast": 16.0, "beta_slow": 1.0,
                                            "original_max_position_embeddings": 64}),
}
MAX_NEW = 12
_jit_forward = jax.jit(forward, static_argnums=0)


@torch.no_grad()
def _randomize(model: "torch.nn.Module", seed: int) -> None:
    """Weights big enough that every term matters: norms ~1+-0.3, biases and sinks ~0.3,
    matrices ~1/sqrt(fan_in) (experts are stored [E, in, out])."""
    g = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        noise = torch.randn(p.shape, generator=g, dtype=torch.float32)
        if "norm" in name:
            p.copy_(1.0 + 0.3 * noise)
        elif p.ndim == 1 or name.endswith("_bias"):
            p.copy_(0.3 * noise)
        elif "experts" in name:
            p.copy_(noise / p.shape[-2] ** 0.5)
        else:
            p.copy_(noise / p.shape[-1] ** 0.5)


def _byte_tokenizer(out: str) -> int:
    """A byte-level BPE tokenizer (256 byte tokens, no merges, `<|endoftext|>` = 256) saved
    with its special tokens into `out`; returns the end-of-text id."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|endoftext|>"])
    tok.save(os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"}, f)
    return tok.token_to_id("<|endoftext|>")


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def peer(request, tmp_path_factory):
    """(name, transformers model, our loaded model, directory) for one tiny config."""
    name = request.param
    out = str(tmp_path_factory.mktemp(f"gpt_oss_{name}"))
    hf_cfg = transformers.GptOssConfig(**CONFIGS[name], tie_word_embeddings=False)
    torch.manual_seed(0)
    model = transformers.GptOssForCausalLM(hf_cfg).eval()
    _randomize(model, seed=len(name))
    model.save_pretrained(out)
    _byte_tokenizer(out)
    return name, model, load("gpt-oss-peer", out), out


def _prompt_ids(vocab: int, lengths, seed: int = 7) -> list:
    rng = np.random.RandomState(seed)
    return [rng.randint(0, vocab, n).tolist() for n in lengths]


@torch.no_grad()
def _hf_greedy(model, ids: list, eos=None) -> list:
    ref = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                         max_new_tokens=MAX_NEW, do_sample=False, pad_token_id=0, eos_token_id=eos)
    return ref[0, len(ids):].tolist()


@pytest.mark.slow
def test_config_read_from_transformers(peer):
    name, model, ours, _ = peer
    cfg, hf = ours.cfg, model.config
    assert (cfg.family, cfg.num_experts, cfg.experts_per_token) == ("gpt_oss", hf.num_local_experts,
                                                                   hf.num_experts_per_tok)
    assert cfg.sliding_window == hf.sliding_window
    assert cfg.sliding_layers == tuple(t == "sliding_attention" for t in hf.layer_types)
    assert isinstance(cfg.rope_scaling, YarnScaling) and cfg.rope_scaling.factor == hf.rope_parameters["factor"]


@pytest.mark.slow
def test_logits_match_transformers(peer):
    """Prompts of 3-4 windows, from position 0, batch of 2: max |diff| < 1e-4 (fp32)."""
    _, model, ours, _ = peer
    window = ours.cfg.sliding_window
    tokens = np.asarray(_prompt_ids(ours.cfg.vocab_size, (4 * window,) * 2), np.int32)
    with torch.no_grad():
        ref = model(torch.tensor(tokens, dtype=torch.long)).logits.numpy()
    got, _ = _jit_forward(ours.cfg, ours.params, tokens, np.broadcast_to(np.arange(tokens.shape[1]), tokens.shape))
    diff = float(np.abs(np.asarray(got) - ref).max())
    assert diff < 1e-4, diff
    assert np.abs(ref).max() > 1.0  # the logits are not trivially small


@pytest.mark.slow
def test_grouped_dispatch_equals_dense(peer):
    _, _, ours, _ = peer
    tokens = np.asarray(_prompt_ids(ours.cfg.vocab_size, (19, 19), seed=3), np.int32)
    positions = np.broadcast_to(np.arange(tokens.shape[1]), tokens.shape)
    both = jax.jit(lambda p: [forward(ours.cfg.replace(moe_dispatch=d), p, tokens, positions)[0]
                              for d in ("grouped", "dense")])
    grouped, dense = both(ours.params)
    np.testing.assert_allclose(np.asarray(grouped), np.asarray(dense), atol=2e-5, rtol=0)


@pytest.mark.slow
def test_greedy_sampler_matches_transformers(peer):
    """Ragged prompts (left-padded together) longer than the window, cached decode."""
    name, model, ours, _ = peer
    if name != sorted(CONFIGS)[-1]:
        pytest.skip("one config is enough for the ragged sampler (the CLI check decodes the other)")
    w = ours.cfg.sliding_window
    prompts = _prompt_ids(ours.cfg.vocab_size, (2 * w + 1, w + 2, 3 * w), seed=11)
    out = Sampler(ours.cfg, pad_id=0)(ours.params, prompts, jax.random.key(0),
                                      SamplingConfig(MAX_NEW, temperature=0.0))
    for row, ids in enumerate(prompts):
        assert out.tokens[row].tolist() == _hf_greedy(model, ids), row


@pytest.mark.slow
def test_cli_generate_matches_transformers(peer, capsys):
    name, model, ours, path = peer
    if name != sorted(CONFIGS)[0]:
        pytest.skip("one config is enough for the CLI (the ragged sampler check decodes the other)")
    prompt = "The quick brown fox jumps over the lazy dog"
    cli.main(["generate", "--model", "gpt-oss-peer", "--path", path, "--prompt", prompt, "--temperature", "0",
              "--max-new-tokens", str(MAX_NEW), "--json"])
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    ids = record["prompt_ids"]
    assert len(ids) == len(prompt) > ours.cfg.sliding_window  # one token per byte
    eos = ours.tokenizer.eos_id
    ref = _hf_greedy(model, ids, eos=eos)
    assert record["completion_ids"] == ref


@pytest.mark.slow
def test_expert_sharded_greedy_equals_one_device(peer):
    """8 simulated devices (data=2, fsdp=2, tensor=2): the experts split over `fsdp` by the
    `expert` rule; greedy tokens equal one device's."""
    name, _, ours, path = peer
    if name != sorted(CONFIGS)[-1]:
        pytest.skip("one config is enough for the mesh")
    mesh = make_mesh("data=2,fsdp=2,tensor=2")
    sharded = load("gpt-oss-peer", path, mesh=mesh)
    gate_up = sharded.params["layers"]["mlp"]["gate_up"]  # [L, E, D, 2F]
    assert tuple(gate_up.sharding.spec)[:2] == (None, "fsdp")
    e = ours.cfg.num_experts
    assert {s.data.shape[1] for s in gate_up.addressable_shards} == {e // 2}
    prompts = _prompt_ids(ours.cfg.vocab_size, (13, 9, 16, 11), seed=5)
    scfg = SamplingConfig(MAX_NEW, temperature=0.0)
    one = Sampler(ours.cfg, pad_id=0)(ours.params, prompts, jax.random.key(0), scfg)
    eight = Sampler(sharded.cfg, mesh, pad_id=0)(sharded.params, prompts, jax.random.key(0), scfg)
    assert np.asarray(eight.tokens).tolist() == np.asarray(one.tokens).tolist()


@pytest.mark.slow
def test_bf16_export_round_trips(peer, tmp_path):
    """export_hf(bf16) -> our loader gives the bf16-rounded params and the same config; transformers
    loads the export and its logits equal ours from the reloaded params."""
    name, _, ours, _ = peer
    if name != sorted(CONFIGS)[-1]:
        pytest.skip("one config is enough for the export")
    assert from_hf_config(hf_config(ours.cfg)) == ours.cfg
    out = export_hf(ours.cfg, ours.params, str(tmp_path / "export"), dtype="bfloat16")
    back = load("gpt-oss-export", out)
    assert back.cfg == ours.cfg
    for a, b in zip(jax.tree.leaves(back.params), jax.tree.leaves(ours.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b).astype(jnp.bfloat16).astype(np.float32))
    hf = transformers.GptOssForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    tokens = np.asarray(_prompt_ids(ours.cfg.vocab_size, (3 * ours.cfg.sliding_window,), seed=2), np.int32)
    with torch.no_grad():
        ref = hf(torch.tensor(tokens, dtype=torch.long)).logits.numpy()
    got, _ = _jit_forward(back.cfg, back.params, tokens, np.arange(tokens.shape[1])[None])
    assert np.abs(np.asarray(got) - ref).max() < 1e-4


@pytest.mark.slow
def test_ring_cache_decode_equals_full_cache(peer):
    """Sliding-window layers decode from a window-sized ring (`decode_cache(windows=...)`):
    the caches have W slots on those layers, and the logits of steps that wrap the ring
    equal a full-size cache's."""
    from prd_jax.model.decode import decode_cache, decode_step, decode_weights, init_cache, ring_windows

    name, _, ours, _ = peer
    if name != sorted(CONFIGS)[-1]:
        pytest.skip("one config is enough for the ring (the sampler checks decode through rings on both)")
    cfg, w = ours.cfg, ours.cfg.sliding_window
    prompts = np.asarray(_prompt_ids(cfg.vocab_size, (w + 3,) * 2, seed=9), np.int32)
    plen, steps = prompts.shape[1], 2 * w + 1
    prompts[1, :2] = 0  # row 1 is left-padded: its keys start at slot 2
    start = jnp.array([0, 2], jnp.int32)
    cache = init_cache(cfg, 2, plen)
    cache = cache.replace(start=start)
    positions = np.maximum(np.arange(plen)[None, :] - np.asarray(start)[:, None], 0)
    _, cache = jax.jit(forward, static_argnums=0, static_argnames="prefill")(
        cfg, ours.params, prompts, positions, cache, prefill=True)
    slots = plen + steps
    ring = decode_cache(cache, slots=slots, windows=ring_windows(cfg))
    full = decode_cache(cache, slots=slots)
    assert [c[1].shape[2] for c in ring] == [w if cfg.layer_window(i) else slots for i in range(cfg.num_layers)]
    weights = decode_weights(cfg, ours.params)
    step = jax.jit(lambda c, t, p, i: decode_step(cfg, weights, t, p, c, start, i))
    tok = jnp.asarray(prompts[:, -1])
    for s in range(steps):
        pos = plen + s - start
        got, ring = step(ring, tok, pos, jnp.int32(plen + s))
        ref, full = step(full, tok, pos, jnp.int32(plen + s))
        np.testing.assert_allclose(np.asarray(got), np.asarray(ref), atol=1e-5, rtol=0)
        tok = jnp.argmax(ref, axis=-1).astype(jnp.int32)
