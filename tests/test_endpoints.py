"""Remote endpoints as they really behave (`prd_jax/backends/endpoints.py`): per endpoint kind,
the request bodies carry no parameter that kind refuses; rating reads fall back to the
written rating; a 400 naming a parameter stops the run; top-k off is sent as each token-id
server spells it; reasoning tokens are recorded and summed; mean@k is over common problems;
the request cache resumes on a URI workdir; summaries name the served model.

The scripted endpoint is `tests/fake_openai.py` (`--mode reasoning`: OpenAI's o-series 400s;
`--mode gemini`: thought tokens outside `completion_tokens`)."""

import json
import os
import re
import types
import uuid

import ml_collections
import numpy as np
import pytest

from prd_jax import fileio
from prd_jax.backends.cache import RequestCache
from prd_jax.backends.config import BackendConfig
from prd_jax.backends.endpoints import ENDPOINTS, refused_param, usage_counts
from prd_jax.backends.remote_lm import RemoteHost
from prd_jax.model.loader import smollm2_gguf_path
from prd_jax.model.tokenizer import Tokenizer
from test_backend_client import _log, _start_fake

# What each real endpoint refuses (sources: docs/backends.md), written out here, not read from the table.
REFUSED = {"openai_reasoning": {"max_tokens", "temperature", "top_p", "logprobs", "top_logprobs", "top_k",
                                "continue_final_message", "add_generation_prompt", "generation_config"},
           "gemini": {"logprobs", "top_logprobs", "top_k", "continue_final_message", "generation_config"},
           "chat": {"top_k", "continue_final_message", "generation_config", "return_token_ids"},
           "completions": {"top_k", "return_token_ids", "return_tokens_as_token_ids"}}


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.from_gguf(smollm2_gguf_path())


class _Capture:
    """A client that records bodies and answers nothing (the bodies are what is checked)."""

    def __init__(self):
        self.bodies = []

    def post_many(self, path, bodies, check, tags=None):
        from prd_jax.backends.client import Answer

        self.bodies += bodies
        return [Answer(False, error="captured") for _ in bodies]

    def scrub(self, text):
        return text


def _bodies(tok, endpoint, api, scfg, rating=True):
    backend = BackendConfig.from_config(dict(kind="openai", base_url="http://127.0.0.1:9/v1", model="m", api=api,
                                             endpoint=endpoint, api_key_env=""))
    host = RemoteHost(backend, tok, _Capture())
    host.begin(2)
    ids = tok.encode("What is 2+3?")
    prompts = np.zeros((2, len(ids) + 2), np.int32)
    prompts[:, 2:] = ids
    lengths = np.full((2,), len(ids), np.int32)
    keys = np.zeros((2, 2), np.uint32)
    host.generate(prompts, lengths, keys, np.ones((2,), bool), scfg=scfg, name="draft")
    if rating:
        host.next_logits(prompts, lengths, np.ones((2,), bool), name="judge")
    return host.client.bodies


def _scfg(temperature, top_p, top_k, num_samples, max_new_tokens):
    """The fields of a call's sampling config that `RemoteHost.generate` reads."""
    return types.SimpleNamespace(temperature=temperature, top_p=top_p, top_k=top_k, num_samples=num_samples,
                                 max_new_tokens=max_new_tokens)


SAMPLED = _scfg(1.0, 0.95, 0, 2, 8)


@pytest.mark.parametrize("endpoint,api", [("openai_reasoning", "chat"), ("gemini", "chat"), ("chat", "chat"),
                                          ("completions", "completions")])
def test_no_refused_parameter_is_sent(tok, endpoint, api):
    bodies = _bodies(tok, endpoint, api, SAMPLED)
    assert len(bodies) == 2 * 2 + 2  # 2 prompts x 2 samples, then 2 rating reads
    for body in bodies:
        assert not set(body) & REFUSED[endpoint], (endpoint, sorted(body))
    if endpoint == "openai_reasoning":  # the budget goes to the field that covers hidden reasoning
        assert all(b["max_completion_tokens"] in (8, 1024) for b in bodies)


def test_transformers_serve_bodies_use_only_fields_it_accepts(tok):
    """transformers serve answers 422 to any field outside its params class (read from the
    installed transformers); top-k off and the stop ids travel in its `generation_config`."""
    chat = pytest.importorskip("transformers.cli.serving.chat_completion")
    allowed = chat.TransformersCompletionCreateParamsStreaming.__mutable_keys__
    bodies = _bodies(tok, "transformers", "chat", SAMPLED)
    for body in bodies:
        assert set(body) <= allowed, sorted(set(body) - allowed)
        assert not set(body) & chat.UNUSED_CHAT_COMPLETION_FIELDS  # ignored fields (logprobs) are not sent
    gen = json.loads(bodies[0]["generation_config"])
    assert gen == {"do_sample": True, "temperature": 1.0, "top_p": 0.95, "top_k": 0,
                   "eos_token_id": list(tok.stop_ids)}


@pytest.mark.parametrize("endpoint,api,off,ids_back", [
    ("vllm", "completions", -1, True), ("sglang", "completions", -1, False), ("prd_jax", "completions", 0, True),
    ("vllm", "chat", -1, False)])
def test_top_k_off_is_sent_as_each_token_server_spells_it(tok, endpoint, api, off, ids_back):
    bodies = _bodies(tok, endpoint, api, SAMPLED, rating=False)
    assert [b["top_k"] for b in bodies] == [off] * 4
    assert [(b["temperature"], b["top_p"]) for b in bodies] == [(1.0, 0.95)] * 4
    assert all(("return_token_ids" in b) == ids_back for b in bodies)
    k20 = _bodies(tok, endpoint, api, _scfg(1.0, 1.0, 20, 1, 4), rating=False)
    assert [b["top_k"] for b in k20] == [20, 20]


def test_refused_parameter_is_read_from_real_error_bodies():
    o3 = {"error": {"message": "Unsupported parameter: 'temperature' is not supported with this model.",
                    "type": "invalid_request_error", "param": "temperature", "code": "unsupported_parameter"}}
    assert refused_param(400, o3) == "temperature"
    assert refused_param(400, {"error": {"message": "Unrecognized request argument supplied: top_k",
                                         "param": None}}) == "top_k"
    assert refused_param(422, {"detail": "Unexpected fields in the request: {'top_k'}"}) == "top_k"
    assert refused_param(400, {"error": {"message": "top_k must be -1 (disable), or at least 1, got 0.",
                                         "param": None}}) is None
    assert refused_param(429, o3) is None and refused_param(401, {"error": {"message": "bad key"}}) is None


def test_usage_counts_reasoning_inside_and_outside_completion_tokens():
    openai = {"prompt_tokens": 12, "completion_tokens": 30, "total_tokens": 42,
              "completion_tokens_details": {"reasoning_tokens": 22}}
    assert usage_counts(openai) == (30, 22)
    gemini = {"prompt_tokens": 12, "completion_tokens": 8, "total_tokens": 31}  # 11 thought tokens billed apart
    assert usage_counts(gemini) == (19, 11)
    assert usage_counts({"prompt_tokens": 3, "completion_tokens": 5}) == (5, 0)


def test_moved_and_mismatched_fields_name_what_is_allowed():
    base = dict(kind="openai", base_url="http://127.0.0.1:9/v1", model="m", api_key_env="")
    for moved in ("token_param", "send_sampling", "chat_prefill"):
        with pytest.raises(ValueError, match=rf"config.backend.{moved} moved: set config.backend.endpoint"):
            BackendConfig.from_config(dict(base, api="chat", **{moved: 1}))
    with pytest.raises(ValueError, match=r"config.backend.api='completions'; allowed: \('chat',\)"):
        BackendConfig.from_config(dict(base, api="completions", endpoint="openai_reasoning"))
    with pytest.raises(ValueError, match=r"config.backend.endpoint='ollama'; allowed: \('openai_reasoning'"):
        BackendConfig.from_config(dict(base, api="chat", endpoint="ollama"))
    with pytest.raises(ValueError, match="config.backend.thinking_budget=-1; allowed: 0"):
        BackendConfig.from_config(dict(base, api="chat", endpoint="vllm", thinking_budget=-1))
    assert BackendConfig.from_config(dict(base, endpoint="gemini")).api == "chat"  # one API: inferred
    assert set(ENDPOINTS) == {"openai_reasoning", "gemini", "vllm", "sglang", "prd_jax", "transformers", "chat",
                              "completions"}


def test_summary_mean_at_k_is_over_problems_every_operator_answered():
    from prd_jax.evaluate import markdown_table, summarize

    def row(pid, op, s, correct, failed=False):
        r = {"problem_id": pid, "operator": op, "sample": s, "correct": correct, "parsed": True, "b_seq": 10,
             "b_total": 10 + 10 * (pid == "c"), "b_seq_io": 20, "b_total_io": 20}
        return dict(r, failed=["http 500"]) if failed else r

    rows = [row(p, "a", s, c) for p, cs in (("x", (1, 1)), ("y", (0, 1)), ("c", (1, 1))) for s, c in enumerate(cs)]
    rows += [row("x", "b", 0, 0), row("x", "b", 1, 0), row("y", "b", 0, 1), row("y", "b", 1, 1),
             row("c", "b", 0, 1), row("c", "b", 1, 0, failed=True)]
    a, b = summarize(rows)
    assert (a["problems"], b["problems"]) == (2, 2)  # "c" failed for b: left out of both
    assert a["mean_at_k"] == pytest.approx((1.0 + 0.5) / 2) and b["mean_at_k"] == pytest.approx((0.0 + 1.0) / 2)
    assert (a["failed"], b["failed"], a["problems_dropped"]) == (0, 1, 1)
    assert a["b_total"] == pytest.approx(10.0)  # c's budgets (20) left out too
    md = markdown_table([a, b])
    assert "over the 2 problems every operator answered; 1 problems with a failed row are left out" in md
    assert "| b | 2 | 2 | 0.500 (1 failed) |" in md and "| a | 2 | 2 | 0.750 |" in md


@pytest.mark.parametrize("root", ["local", "ram"])
def test_request_cache_resumes_on_a_uri_workdir(tmp_path, root):
    base = str(tmp_path) if root == "local" else f"ram://prd_jax_tests/{uuid.uuid4().hex}"
    fileio.makedirs(base)
    path = os.path.join(base, "requests.jsonl")
    cache = RequestCache(path, flush_s=3600.0)
    cache.put("k1", {"a": 1})
    cache.flush()  # not yet due on a URI: nothing written
    if root == "ram":
        assert not fileio.exists(path + ".0")
    cache.put("k2", {"a": 2})
    cache.close()
    again = RequestCache(path)
    assert again.get("k1") == {"a": 1} and again.get("k2") == {"a": 2} and len(again) == 2
    again.put("k3", {"a": 3})
    again.close()
    third = RequestCache(path)
    assert len(third) == 3
    if root == "ram":  # one object per flush, numbered on
        assert fileio.exists(path + ".1") and not fileio.exists(path + ".2")


# ----------------------------------------------------------------------------- against the scripted endpoint

def _config(port, endpoint, **backend):
    fields = dict(kind="openai", base_url=f"http://127.0.0.1:{port}/v1", model="fake-o3", api="chat",
                  endpoint=endpoint, api_key_env="", timeout_s=10.0, max_retries=1, retry_base_s=0.05,
                  max_concurrency=4, tokenizer="smollm2-135m", rating_max_tokens=24)
    fields.update(backend)
    return ml_collections.ConfigDict(dict(
        model="smollm2-135m", model_path="", task="gsm8k", data_dir="", num_problems=2, k_samples=2, batch_size=2,
        seed=0, sampling=dict(temperature=1.0, top_p=1.0, top_k=0), max_problem_tokens=192,
        operators=[dict(type="long_cot", max_new_tokens=32),
                   dict(type="pdr", schedule=(2, 1), distill="shared_topk", k=1, selector="self_pointwise",
                        judge=dict(domain="math", max_new_tokens=16), max_new_tokens=32,
                        candidate_max_tokens=24, truncation_head=8)],
        backend=fields))


def _results(workdir):
    return fileio.read_jsonl(os.path.join(workdir, "results.jsonl"))


@pytest.mark.slow
@pytest.mark.parametrize("mode,endpoint", [("reasoning", "openai_reasoning"), ("gemini", "gemini")])
def test_reasoning_endpoints_run_with_written_ratings_and_reasoning_share(tmp_path, mode, endpoint):
    from prd_jax.evaluate import evaluate

    proc, port, log = _start_fake(tmp_path, "--mode", mode)
    try:
        workdir = str(tmp_path / "ev")
        evaluate(_config(port, endpoint), workdir, progress=False)
        entries = _log(log)
        assert entries and all(e["status"] == 200 for e in entries)  # nothing was refused
        for e in entries:
            assert not set(e["fields"]) & REFUSED[endpoint]
        rows = _results(workdir)
        assert len(rows) == 2 * 2 * 2 and not any(r.get("failed") for r in rows)
        assert {r["model"] for r in rows} == {"fake-o3"}
        ratings = sum(r["remote"]["rating_written"] for r in rows)
        assert ratings > 0 and sum(r["remote"]["rating_unavailable"] for r in rows) == 0
        hidden = 7 if mode == "reasoning" else 11
        with open(os.path.join(workdir, "summary.md")) as f:
            summary = f.read()
        assert summary.startswith(f"# gsm8k: fake-o3 via http://127.0.0.1:{port}/v1 ({endpoint})")
        assert "smollm2" not in summary
        for op in {r["operator"] for r in rows}:
            calls = [c for r in rows if r["operator"] == op for c in r["remote_calls"]]
            assert all(c["reasoning_tokens"] == hidden for c in calls)  # every answer's hidden tokens
            done, thought = sum(c["completion_tokens"] for c in calls), hidden * len(calls)
            line = re.search(rf"^\| {re.escape(op)} \| (\d+) \| (\d+) \| ([0-9.]+) \|$", summary, re.M)
            assert line and (int(line.group(1)), int(line.group(2))) == (done, thought), (op, line)
            assert float(line.group(3)) == pytest.approx(thought / done, abs=5e-4)
        for r in rows:  # budgets are the bill, hidden thought tokens included
            if r["operator"].startswith("long_cot"):
                assert r["b_total"] == r["remote_calls"][0]["completion_tokens"] > hidden
    finally:
        proc.kill()


@pytest.mark.slow
def test_a_refused_parameter_stops_the_run_with_one_line(tmp_path):
    from prd_jax.backends.client import RefusedParameter
    from prd_jax.evaluate import evaluate

    proc, port, log = _start_fake(tmp_path, "--mode", "reasoning")
    try:  # the generic chat row sends temperature / top_p / max_tokens: an o-series model refuses them
        config = _config(port, "chat", max_concurrency=2)
        with pytest.raises(RefusedParameter) as stop:
            evaluate(config, str(tmp_path / "ev"), progress=False)
        message = str(stop.value)
        assert "\n" not in message and "refused request parameter" in message
        assert re.search(r"parameter '(max_tokens|temperature|top_p)'", message)
        refusals = [e for e in _log(log) if e["status"] == 400]
        assert 3 <= len(refusals) <= 3 + 2 - 1  # stopped after 3 (up to max_concurrency - 1 were in flight)
        rows = _results(str(tmp_path / "ev"))  # the batches answered before the stop: failed, and no more
        assert len(rows) < 8 and all("http 400" in r["failed"][0] for r in rows)
    finally:
        proc.kill()


@pytest.mark.slow
def test_a_uri_workdir_resumes_from_its_request_cache(tmp_path):
    from prd_jax.evaluate import evaluate

    proc, port, log = _start_fake(tmp_path, "--mode", "reasoning")
    try:
        workdir = f"ram://prd_jax_tests/{uuid.uuid4().hex}/ev"
        config = _config(port, "openai_reasoning")
        config.operators = config.operators[:1]
        evaluate(config, workdir, progress=False)
        sent = len(_log(log))
        assert sent == 4 and fileio.exists(os.path.join(workdir, "requests.jsonl.0"))
        fileio.write_text(os.path.join(workdir, "results.jsonl"), "")  # the rows were lost (a killed run)
        evaluate(config, workdir, progress=False)
        assert len(_log(log)) == sent  # every answer came from the cache
        assert len(_results(workdir)) == 4
    finally:
        proc.kill()
