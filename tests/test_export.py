"""`prd-jax export` against transformers: the exported directory of a training workdir (SmolLM2's
tokenizer, or the char vocabulary of from-scratch runs) and of the embedded SmolLM2 loads in
`AutoModelForCausalLM` / `AutoTokenizer`, whose logits, greedy tokens, encodings and chat
template equal ours; `prd-jax generate --path DIR` reads it back without `--model`."""

import json
import os

import jax
import numpy as np
import pytest

from prd_jax.checkpoint import Checkpointer
from prd_jax.config_io import load_config, save_config
from prd_jax.data.synthetic import CharVocab
from prd_jax.export import export_model
from prd_jax.model import NAMED_CONFIGS, forward, init_params
from prd_jax.sampling import Sampler, SamplingConfig

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.peer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL_SMOLLM2 = dict(num_layers=2, hidden=64, intermediate=128, num_heads=4, num_kv_heads=2, head_dim=16)
TEXTS = ["What is 7*8?", "  1 +\n    7 = 8 ² ", "x<|im_start|>y", "Ünïcödé ☃ text", ""]
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi\nthere"},
            {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "2+2?"}]


def _workdir(path, config, seed: int, steps=(1, 2)):
    """A training workdir as `prd-jax train` writes it (config.json, checkpoints of `steps`),
    its params drawn at random (a different draw per step); returns {step: params}."""
    from prd_jax.checkpoint import run_model_config

    path.mkdir(parents=True)
    save_config(config, str(path))
    cfg = run_model_config(json.loads((path / "config.json").read_text()))
    saved = {}
    with Checkpointer(path, save_every=1, keep=5, async_save=False) as ckpt:
        for step in steps:
            saved[step] = init_params(cfg, jax.random.key(seed + step))
            ckpt.save(step, {"params": saved[step], "step": jax.numpy.int32(step)}, force=True)
    return cfg, saved


def _greedy(cfg, params, ids, n, stop_ids):
    sampler = Sampler(cfg, None, pad_id=0)
    out = sampler(params, [ids], jax.random.key(0), SamplingConfig(
        max_new_tokens=n, temperature=0.0, top_p=1.0, top_k=0, num_samples=1, stop_ids=tuple(stop_ids)))
    return [int(t) for t in np.asarray(out.tokens[0, :int(out.lengths[0])])]


def _check_against_transformers(out, cfg, params, prompt_ids, ours_stop_ids, n=8):
    """transformers loads `out`: logits close to ours, greedy tokens equal, generation_config's
    eos ids our stop ids."""
    model = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    assert list(np.atleast_1d(model.generation_config.eos_token_id)) == list(ours_stop_ids)
    tokens = np.asarray([prompt_ids], np.int32)
    with torch.no_grad():
        ref = model(torch.from_numpy(tokens).long()).logits.numpy()
    positions = np.arange(tokens.shape[1], dtype=np.int32)[None]
    ours = np.asarray(jax.jit(forward, static_argnums=0)(cfg, params, tokens, positions)[0])
    scale = float(np.abs(ref).max())
    assert float(np.abs(ours - ref).max()) < 1e-5 * max(scale, 10.0) and scale > 0.1
    with torch.no_grad():
        hf = model.generate(torch.tensor([prompt_ids]), max_new_tokens=n, do_sample=False)[0, len(prompt_ids):]
    mine = _greedy(cfg, params, prompt_ids, n, ours_stop_ids)
    assert hf.tolist() == mine and len(mine) >= 2
    return mine


def _generate_cli(capsys, path, prompt, n):
    from prd_jax.cli import main

    main(["generate", "--path", path, "--prompt", prompt, "--chat", "--max-new-tokens", str(n), "--json"])
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@pytest.mark.slow
def test_export_of_a_smollm2_workdir(tmp_path):
    from prd_jax.model.loader import smollm2_gguf_path
    from prd_jax.model.tokenizer import Tokenizer

    config = load_config(os.path.join(ROOT, "configs", "sft", "tiny.py"))
    config.tokenizer, config.model.name, config.model.overrides = "model", "smollm2-135m", SMALL_SMOLLM2
    cfg, saved = _workdir(tmp_path / "run", config, seed=3)
    out = export_model(tmp_path / "hf", workdir=str(tmp_path / "run"), step=1).out_dir
    assert sorted(os.listdir(out)) == ["config.json", "generation_config.json", "model.safetensors",
                                       "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"]
    from safetensors.numpy import load_file

    embed = load_file(os.path.join(out, "model.safetensors"))["model.embed_tokens.weight"]
    np.testing.assert_array_equal(embed, np.asarray(jax.tree.leaves(saved[1]["embed"])[0]))  # step 1, not the newest
    ours = Tokenizer.from_gguf(smollm2_gguf_path())
    hf_tok = transformers.AutoTokenizer.from_pretrained(out)
    for text in TEXTS:
        ids = hf_tok(text, add_special_tokens=True)["input_ids"]
        assert ids == ours.encode(text, add_bos=None), text
        assert hf_tok.decode(ids, skip_special_tokens=True) == ours.decode(ids)
    rendered = hf_tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert rendered == ours.apply_chat_template(MESSAGES) and rendered.endswith("<|im_start|>assistant\n")
    assert (hf_tok.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=True)["input_ids"]
            == ours.encode_chat(MESSAGES))
    assert (hf_tok.eos_token_id, hf_tok.bos_token_id, hf_tok.pad_token_id) == (ours.eos_id, ours.bos_id, ours.pad_id)
    params = jax.device_put(saved[1])
    _check_against_transformers(out, cfg, params, ours.encode_chat(MESSAGES[1:2]), ours.stop_ids)
    with pytest.raises(FileNotFoundError, match=r"no checkpoint step 9; saved steps: \[1, 2\]"):
        export_model(tmp_path / "bad", workdir=str(tmp_path / "run"), step=9)


@pytest.mark.slow
def test_export_of_a_char_vocabulary_workdir(tmp_path, capsys):
    config = load_config(os.path.join(ROOT, "configs", "sft", "tiny.py"))
    cfg, saved = _workdir(tmp_path / "run", config, seed=5, steps=(4,))
    exported = export_model(tmp_path / "hf", workdir=str(tmp_path / "run"))
    out, vocab = exported.out_dir, CharVocab()
    assert exported.missing == {} and exported.source.endswith("run@4")
    hf_tok = transformers.AutoTokenizer.from_pretrained(out)
    texts = TEXTS + ["<|user|>a\tb<|assistant|>c<|eos|>", " spaces  kept . , ! ", "don't"]
    for text in texts:  # encodes and decodes as CharVocab (unknown characters -> <|unk|>)
        ids = hf_tok(text, add_special_tokens=True)["input_ids"]
        assert ids == vocab.encode(text), text
        assert hf_tok.decode(ids, skip_special_tokens=True) == vocab.decode(ids)
        assert hf_tok.decode(ids) == vocab.decode(ids, skip_special=False)
    rendered = hf_tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert rendered == vocab.apply_chat_template(MESSAGES)
    assert hf_tok.apply_chat_template(MESSAGES[:1], tokenize=False, add_generation_prompt=False) == "<|system|>Be brief.\n"
    assert (hf_tok.eos_token_id, hf_tok.pad_token_id, hf_tok.unk_token_id, hf_tok.bos_token_id) == (1, 0, 2, None)
    prompt = vocab.encode_chat([{"role": "user", "content": "What is 7*8?"}])
    mine = _check_against_transformers(out, cfg, jax.device_put(saved[4]), prompt, vocab.stop_ids, n=12)
    record = _generate_cli(capsys, out, "What is 7*8?", 12)  # no --model: a llama of the directory's shape
    assert record["prompt_ids"] == prompt and record["completion_ids"] == mine


@pytest.mark.slow
def test_export_of_the_embedded_smollm2(tmp_path, capsys):
    """The HF directory another server (`transformers serve`) serves: `prd-jax export` with no model."""
    from prd_jax.cli import main
    from prd_jax.model import load

    main(["export", "--out", str(tmp_path / "smollm2")])
    out = str(tmp_path / "smollm2")
    assert "exported" in capsys.readouterr().out
    base = load("smollm2-135m")
    prompt = base.tokenizer.encode_chat([{"role": "user", "content": "What is 7*8?"}])
    mine = _check_against_transformers(out, base.cfg, base.params, prompt, base.tokenizer.stop_ids, n=10)
    record = _generate_cli(capsys, out, "What is 7*8?", 10)  # no --model: family and shape from config.json
    assert record["completion_ids"] == mine
    with open(os.path.join(out, "config.json")) as f:
        raw = json.load(f)
    assert raw["num_hidden_layers"] == NAMED_CONFIGS["smollm2-135m"].num_layers and raw["eos_token_id"] == [2, 0]
