"""`prd-jax serve` (SmolLM2-135M on loopback) and the operators run through it.

Conformance: every listed operator run with `backend.api=completions` against the server
gives the rows the in-graph operator gives (greedy: same final text, correct, the four
budgets, the number of calls). Chat mode: each row's budgets are the usage the server
billed. The official `openai` client works against the server. `ignore_eos` and `min_tokens`
return the tokens HF transformers' greedy `generate` returns on the same weights."""

import concurrent.futures
import json
import os

import httpx
import pytest

from prd_jax.backends.config import with_backend
from prd_jax.config_io import load_config
from prd_jax.model.loader import smollm2_gguf_path
from prd_jax.model.tokenizer import Tokenizer
from servers import prd_serve

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GSM8K = os.path.join(ROOT, "configs", "eval", "smollm2_gsm8k.py")
NAME = "smollm2-135m"
JUDGE = dict(max_new_tokens=8, budget_multiple=1)
SMALL = dict(max_new_tokens=12, candidate_max_tokens=12, truncation_head=4)
OPERATORS = [
    dict(type="long_cot", max_new_tokens=16),
    dict(type="sr", rounds=1, **SMALL),
    dict(type="pdr", schedule=(2, 1), distill="shared_topk", k=2, selector="self_pointwise", judge=JUDGE, **SMALL),
    dict(type="pdr", schedule=(2, 1), distill="global_summary", k=2, kappa=12, **SMALL),
    dict(type="best_of_n", n=4, selector="pairwise_v1", judge=JUDGE, **SMALL),
    dict(type="rsa", population=2, subset=2, loops=1, **SMALL),
    dict(type="adaptive_pdr", waves=2, min_fanout=2, max_fanout=2, tau=0.75, k=2, signal="majority", **SMALL),
]


@pytest.fixture(scope="module")
def server():
    with prd_serve("--model", NAME) as url:
        yield url


@pytest.mark.slow
def test_models_health_and_bad_requests_name_the_field(server):
    assert httpx.get(server + "/v1/models", timeout=60).json()["data"][0]["id"] == NAME
    cases = [({"model": "gpt-4", "prompt": "hi"}, 404, "model"),
             ({"model": NAME, "prompt": "hi", "temperature": 3}, 400, "temperature"),
             ({"model": NAME, "prompt": "hi", "max_tokens": 0}, 400, "max_tokens"),
             ({"model": NAME, "prompt": [1, 2, 10 ** 9]}, 400, "prompt"),
             ({"model": NAME, "prompt": "hi", "presence_penalty": 1}, 400, "presence_penalty"),
             ({"model": NAME, "prompt": "hi", "max_tokens": 9000}, 400, "max_tokens")]
    for body, status, field in cases:
        r = httpx.post(server + "/v1/completions", json=body, timeout=60)
        assert r.status_code == status and r.json()["error"]["param"] == field, (body, r.text)
    assert "8192" in httpx.post(server + "/v1/completions", json=cases[-1][0], timeout=60).json()["error"]["message"]
    r = httpx.post(server + "/v1/completions", content=b"{not json", timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "body"
    assert httpx.get(server + "/health", timeout=60).status_code == 200  # still up


@pytest.mark.slow
def test_concurrent_requests_share_sampler_calls_and_usage_is_exact(server):
    from prd_jax.model.loader import smollm2_gguf_path
    from prd_jax.model.tokenizer import Tokenizer

    tok = Tokenizer.from_gguf(smollm2_gguf_path())
    prompts = [f"Question {i}: what is {i} + {i}?" for i in range(8)]
    before = httpx.get(server + "/health", timeout=60).json()["sampler_calls"]

    def one(p):
        return httpx.post(server + "/v1/completions", timeout=120, json={
            "model": NAME, "prompt": p, "max_tokens": 8 + len(p) % 5, "temperature": 0, "return_token_ids": True}).json()

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(one, prompts))
    health = httpx.get(server + "/health", timeout=60).json()
    assert health["sampler_calls"] > before
    assert health["peak_rows"] > 1  # decoded together, not one request at a time
    for p, out in zip(prompts, outs):
        choice = out["choices"][0]
        assert out["usage"]["prompt_tokens"] == len(tok.encode(p, add_bos=None))
        assert out["usage"]["completion_tokens"] == len(choice["token_ids"]) <= 8 + len(p) % 5
        assert choice["finish_reason"] == ("stop" if choice["token_ids"][-1] in tok.stop_ids else "length")
    # Alone or in a crowd, a greedy row decodes the same tokens (its own seed and prompt only).
    assert one(prompts[3])["choices"][0]["token_ids"] == outs[3]["choices"][0]["token_ids"]


@pytest.mark.slow
def test_official_openai_client(server):
    import openai

    client = openai.OpenAI(base_url=server + "/v1", api_key="unused")
    out = client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "Name a colour."}],
                                         n=2, max_tokens=10, temperature=1.0, seed=3)
    assert len(out.choices) == 2 and all(c.message.content for c in out.choices)
    assert out.usage.completion_tokens <= 20 and out.usage.prompt_tokens > 5
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=NAME, prompt="word " * 8200, max_tokens=16)
    assert "8192" in str(e.value)


CHAT = [{"role": "user", "content": "What is 2 + 2? Reply with just the number."}]  # greedy: 8 tokens, then EOS


@pytest.fixture(scope="module")
def hf_greedy():
    """Greedy `generate` of HF transformers on the server's weights (the embedded GGUF):
    f(prompt ids, max_new_tokens, eos ids or None (no EOS stopping), min_new_tokens) -> new ids."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    path = smollm2_gguf_path()
    model = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.dirname(path), gguf_file=os.path.basename(path), dtype=torch.float32).eval()
    model.generation_config.eos_token_id = None  # each call passes its own (None: no EOS stopping)

    def generate(ids, max_new_tokens, eos, min_new_tokens=0):
        config = transformers.GenerationConfig(max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=eos,
                                               min_new_tokens=min_new_tokens, pad_token_id=2)
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                 generation_config=config)
        return out[0, len(ids):].tolist()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # on two shared cores, torch's own threads made each call ten times slower
    yield generate
    torch.set_num_threads(threads)


@pytest.mark.slow
@pytest.mark.peer
def test_ignore_eos_and_min_tokens_equal_transformers_generate(server, hf_greedy):
    """A chat whose greedy answer ends with EOS at 8 tokens: with `ignore_eos` the server
    returns all 16 tokens (finish "length"), HF's greedy `generate` with no EOS; with
    `min_tokens: 11` the EOS is masked for 11 tokens, HF's `min_new_tokens=11`. 45 prompt
    tokens + 16 stay within the 64-slot cache width other requests compile."""
    tok = Tokenizer.from_gguf(smollm2_gguf_path())
    prompt = tok.encode_chat(CHAT)

    def chat(**extra):
        out = httpx.post(server + "/v1/chat/completions", timeout=120, json=dict(
            model=NAME, messages=CHAT, max_tokens=16, temperature=0, return_token_ids=True, **extra)).json()
        assert out["usage"]["prompt_tokens"] == len(prompt), out
        choice = out["choices"][0]
        assert out["usage"]["completion_tokens"] == len(choice["token_ids"])
        return choice

    natural = chat()
    ends = len(natural["token_ids"])
    assert natural["finish_reason"] == "stop" and ends <= 10 and natural["token_ids"][-1] in tok.stop_ids
    ignored = chat(ignore_eos=True)
    assert ignored["finish_reason"] == "length" and len(ignored["token_ids"]) == 16
    assert ignored["token_ids"][:ends] == natural["token_ids"]  # greedy: the same answer, then past its EOS
    assert ignored["token_ids"] == hf_greedy(prompt, 16, None)
    late = chat(min_tokens=11)
    assert not set(late["token_ids"][:11]) & set(tok.stop_ids) and len(late["token_ids"]) >= 11
    assert late["token_ids"] == hf_greedy(prompt, 16, list(tok.stop_ids), min_new_tokens=11)


def _config(server, api: str, problems: int = 2, operators=OPERATORS):
    c = with_backend(load_config(GSM8K))
    c.num_problems, c.batch_size, c.sampling.temperature = problems, problems, 0.0
    c.max_problem_tokens = 96  # the first two problems have 66 and 26 tokens: every prompt pads less
    c.operators = operators
    if api:
        c.backend.update(dict(kind="openai", base_url=server + "/v1", model=NAME, api=api, api_key_env="",
                              endpoint="prd_jax", max_concurrency=8))
    return c


def _rows(workdir) -> dict:
    with open(os.path.join(workdir, "results.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    return {(r["problem_id"], r["operator"]): r for r in rows}


@pytest.mark.slow
def test_token_mode_equals_in_graph_operator_for_operator(server, tmp_path):
    from prd_jax.evaluate import evaluate
    from prd_jax.model import load

    # the two sides at once: the in-graph side compiles here while the server decodes the remote side
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        in_graph = pool.submit(evaluate, _config(server, ""), str(tmp_path / "jax"), model=load(NAME), progress=False)
        evaluate(_config(server, "completions"), str(tmp_path / "remote"), progress=False)
        in_graph.result()
    local, remote = _rows(tmp_path / "jax"), _rows(tmp_path / "remote")
    assert local.keys() == remote.keys() and len(local) == 2 * len(OPERATORS)
    for key, a in local.items():
        b = remote[key]
        assert not b.get("failed") and b["remote"]["requests"] > 0
        for field in ("completion", "correct", "b_seq", "b_total", "b_seq_io", "b_total_io", "judge_unparsed"):
            assert a[field] == b[field], (key, field, a[field], b[field])
        assert [c["name"] for c in a["calls"]] == [c["name"] for c in b["calls"]], key


@pytest.mark.slow
def test_chat_mode_runs_every_operator_and_budgets_are_the_servers_usage(server, tmp_path):
    from prd_jax.evaluate import evaluate
    from prd_jax.operators.judges import RatingTokens
    from prd_jax.model.loader import smollm2_gguf_path
    from prd_jax.model.tokenizer import Tokenizer
    from prd_jax.prompts import FORCED_PREFIXES

    rt = RatingTokens.from_tokenizer(Tokenizer.from_gguf(smollm2_gguf_path()))
    workdir = str(tmp_path / "chat")  # one problem: the workdir's request cache holds exactly its rows' requests
    evaluate(_config(server, "chat", 1), workdir, progress=False)
    rows = list(_rows(workdir).values())
    assert len(rows) == len(OPERATORS) and not any(r.get("failed") for r in rows)
    for r in rows:  # every request of the row, with its usage and finish_reason
        assert len(r["remote_calls"]) == r["remote"]["requests"] > 0
        assert all(c["finish_reason"] in ("stop", "length") and c["completion_tokens"] >= 1 for c in r["remote_calls"])
    with open(os.path.join(workdir, "requests.jsonl")) as f:
        answers = [json.loads(line)["response"] for line in f]
    generation = [a for a in answers if a["choices"][0].get("logprobs") is None]  # rating reads ask logprobs
    assert len(generation) < len(answers) or not any(r["judge_unparsed"] for r in rows)
    billed_in = sum(a["usage"]["prompt_tokens"] for a in generation)
    billed_out = sum(a["usage"]["completion_tokens"] for a in generation)
    assert sum(r["b_total_io"] - r["b_total"] for r in rows) == billed_in
    lo = hi = 0  # tokens a forced rating appends locally (judges.py): prefixes + a 1- or 2-token rating per tag
    for r in rows:
        if r["judge_unparsed"]:
            kind = "pairwise" if "pairwise" in r["operator"] else "pointwise"
            suffix, tags = sum(len(p) for p in rt.prefixes[kind]), len(FORCED_PREFIXES[kind])
            lo += r["judge_unparsed"] * (suffix + tags)
            hi += r["judge_unparsed"] * (suffix + 2 * tags)
    assert lo <= sum(r["b_total"] for r in rows) - billed_out <= hi


@pytest.mark.slow
def test_serve_loads_a_training_workdirs_latest_checkpoint(tmp_path):
    import jax
    import numpy as np

    from prd_jax.checkpoint import Checkpointer
    from prd_jax.model import load
    from prd_jax.serve.app import load_for_serving

    base = load(NAME)
    trained = jax.tree.map(lambda p: p * 0.5, base.params)  # stands in for a trained step
    workdir = tmp_path / "run"
    with Checkpointer(workdir, save_every=1, keep=2, async_save=False) as ckpt:
        ckpt.save(7, {"params": trained, "step": jax.numpy.int32(7)}, force=True)
    (workdir / "config.json").write_text(json.dumps({"model": {"name": NAME, "path": ""}, "tokenizer": "model"}))
    cfg, params, tok, name = load_for_serving(NAME, None, str(workdir))
    assert name == f"{NAME}@7" and tok is not None and cfg.max_position == base.cfg.max_position
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(trained)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    (workdir / "config.json").write_text(json.dumps({"model": {"name": NAME}, "tokenizer": "char"}))
    tok = load_for_serving(NAME, None, str(workdir))[2]  # a char-vocabulary run (tests/test_checkpoint_eval.py)
    assert tok.encode("a<|user|>") == [6 + tok.chars.index("a"), 4] and tok.stop_ids == (1, 4)
