"""`prd-jax serve`'s API on a tiny random model with the char vocabulary, in this process on
loopback: streaming with the official `openai` client equals the whole answer, stop strings
end a row at the chunk that completes them (usage counts the tokens returned), stop ids,
`ignore_eos`, `min_tokens`, alternatives at every position, `n` on one prefill, strict
requests (400 naming the field), the API key, the queue bound, cancellation of closed
streams, `/metrics`, `/openapi.json`, and SIGTERM's drain."""

import concurrent.futures
import contextlib
import gc
import json
import re
import signal
import threading
import time

import httpx
import jax
import openai
import pytest
import uvicorn

from prd_jax.data.synthetic import CharVocab
from prd_jax.mesh import make_mesh
from prd_jax.model import get_model_config, init_params
from prd_jax.model.weights import param_shardings
from prd_jax.serve import protocol as P
from prd_jax.serve.app import RETRY_AFTER_RANGE_S, Gate, ServedCharVocab, _DrainingServer, build_app, retry_after_s
from prd_jax.serve.engine import Engine, Row
from servers import free_port

pytestmark = pytest.mark.slow  # one engine compile per module (about a minute on two cores)
NAME, KEY = "tiny-char", "sekret-key-123"
BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"  # jax.monitoring's event per XLA compile
PROMPT = "Question: what is 2 + 3?\n"


@pytest.fixture(scope="module")
def model():
    cfg = get_model_config("tiny").replace(vocab_size=CharVocab().vocab_size)
    return cfg, init_params(cfg, jax.random.key(0))


@contextlib.contextmanager
def running(engine, gate=None, **kwargs):
    """`build_app` under uvicorn on a thread; yields (base URL, server)."""
    gate = gate or Gate()
    port = free_port()
    server = _DrainingServer(uvicorn.Config(build_app(engine, NAME, gate=gate, **kwargs), host="127.0.0.1",
                                            port=port, log_level="warning"), gate, drain_s=30)
    server.install_signal_handlers = lambda: None  # signals are sent by hand here
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 600
    while not (server.started and engine.ready.is_set()):
        assert engine.error is None and time.monotonic() < deadline
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}", server
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@pytest.fixture(scope="module")
def served(model):
    cfg, params = model
    engine = Engine(cfg, params, ServedCharVocab(), max_rows=4, decode_chunk=4)
    with running(engine, api_key=KEY) as (url, _):
        yield url, engine
    engine.stop()


def _post(url, path, body, key=KEY, **kw):
    return httpx.post(url + path, json=body, headers={"Authorization": f"Bearer {key}"}, timeout=120, **kw)


def _greedy(url, **extra):
    body = dict(model=NAME, prompt=PROMPT, max_tokens=40, temperature=0, ignore_eos=True, return_token_ids=True)
    r = _post(url, "/v1/completions", {**body, **extra})
    assert r.status_code == 200, r.text
    return r.json()


def test_streaming_with_the_openai_client_equals_the_whole_answer(served):
    url, _ = served
    client = openai.OpenAI(base_url=url + "/v1", api_key=KEY)
    whole = client.completions.create(model=NAME, prompt=PROMPT, max_tokens=30, temperature=0, n=2)
    chunks = list(client.completions.create(model=NAME, prompt=PROMPT, max_tokens=30, temperature=0, n=2,
                                            stream=True, stream_options={"include_usage": True}))
    assert len(chunks) > 3  # deltas as decode chunks finish, not one block
    for i in range(2):
        mine = [c.choices[0] for c in chunks if c.choices and c.choices[0].index == i]
        assert "".join(c.text for c in mine) == whole.choices[i].text
        assert [c.finish_reason for c in mine if c.finish_reason] == [whole.choices[i].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage == whole.usage
    chat = dict(model=NAME, messages=[{"role": "user", "content": "Hi"}], max_tokens=20, temperature=0)
    reply = client.chat.completions.create(**chat)
    deltas = list(client.chat.completions.create(**chat, stream=True))
    assert deltas[0].choices[0].delta.role == "assistant"
    assert "".join(d.choices[0].delta.content or "" for d in deltas) == reply.choices[0].message.content
    assert deltas[-1].choices[0].finish_reason == reply.choices[0].finish_reason
    raw = _post(url, "/v1/chat/completions", {**chat, "stream": True}).text
    assert raw.rstrip().endswith("data: [DONE]")
    P.ChatChunk.model_validate(json.loads(raw.split("\n\n")[1][len("data: "):]))


def test_stop_strings_end_the_row_at_the_chunk_that_completes_them(served):
    url, engine = served
    full = _greedy(url)["choices"][0]
    text, ids, tok = full["text"], full["token_ids"], CharVocab()
    assert len(ids) == 40 and tok.decode(ids) == text
    stop = text[13:15]
    cut = text.index(stop)
    keep = next(k for k in range(1, 41) if stop in tok.decode(ids[:k]))  # the token completing the stop string
    before = engine.calls
    got = _greedy(url, stop=[stop, "\x00never"])
    choice = got["choices"][0]
    assert choice["text"] == text[:cut] and choice["finish_reason"] == "stop"
    assert got["usage"]["completion_tokens"] == keep == len(choice["token_ids"]) and choice["token_ids"] == ids[:keep]
    assert engine.calls - before <= -(-keep // 4) + 1  # 40 tokens would take 10 chunks
    streamed = "".join(json.loads(e[6:])["choices"][0]["text"] for e in _post(
        url, "/v1/completions", dict(model=NAME, prompt=PROMPT, max_tokens=40, temperature=0, ignore_eos=True,
                                     stream=True, stop=stop)).text.split("\n\n") if e.startswith("data: {"))
    assert streamed == text[:cut]


def test_stop_token_ids_min_tokens_and_ignore_eos(served):
    url, _ = served
    ids = _greedy(url)["choices"][0]["token_ids"]
    assert len(ids) == 40  # ignore_eos: the full budget
    stop_id = ids[5]
    first = ids.index(stop_id)
    got = _greedy(url, stop_token_ids=[stop_id])["choices"][0]
    assert got["token_ids"] == ids[:first + 1] and got["finish_reason"] == "stop"
    late = _greedy(url, stop_token_ids=[stop_id], min_tokens=first + 3)["choices"][0]
    assert stop_id not in late["token_ids"][:first + 3]
    assert late["finish_reason"] == "length" or late["token_ids"][-1] == stop_id
    assert P.stop_ids(P.parse(P.CompletionRequest, dict(model="m", prompt="x", ignore_eos=True, stop_token_ids=[9])),
                      CharVocab()) == [9]
    assert P.stop_ids(P.parse(P.CompletionRequest, dict(model="m", prompt="x", stop_token_ids=[9])),
                      CharVocab()) == [1, 4, 9]


def test_logprobs_at_every_position(served):
    url, _ = served
    lp = _greedy(url, logprobs=3, max_tokens=12)["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == 12
    for token, chosen, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
        values = list(top.values())
        assert len(top) == 3 and values == sorted(values, reverse=True)
        assert top[token] == pytest.approx(chosen, abs=1e-5) == pytest.approx(values[0], abs=1e-5)  # greedy: the top
        assert sum(2.718281828 ** v for v in values) <= 1 + 1e-5
    assert lp["text_offset"] == [sum(len(t) for t in lp["tokens"][:i]) for i in range(12)]
    chat = _post(url, "/v1/chat/completions", dict(model=NAME, messages=[{"role": "user", "content": "Hi"}],
                                                   max_tokens=6, temperature=0, logprobs=True, top_logprobs=2)).json()
    content = chat["choices"][0]["logprobs"]["content"]
    assert len(content) == chat["usage"]["completion_tokens"]
    assert all(len(c["top_logprobs"]) == 2 and c["top_logprobs"][0]["token"] == c["token"] for c in content)


def test_n_samples_share_one_prefill(served):
    url, engine = served
    before = engine.prefills
    out = _post(url, "/v1/completions", dict(model=NAME, prompt=PROMPT, max_tokens=8, n=3, temperature=1.0,
                                             seed=5, return_token_ids=True)).json()
    assert engine.prefills - before == 1 and len(out["choices"]) == 3
    assert len({tuple(c["token_ids"]) for c in out["choices"]}) > 1  # different keys per sample
    assert out["usage"]["completion_tokens"] == sum(len(c["token_ids"]) for c in out["choices"])


@pytest.mark.parametrize("body,field", [
    ({"foo": 1}, "foo"), ({"presence_penalty": 0.5}, "presence_penalty"), ({"logit_bias": {"5": 1}}, "logit_bias"),
    ({"response_format": {"type": "json_object"}}, "response_format"), ({"temperature": 3}, "temperature"),
    ({"logprobs": 21}, "logprobs"), ({"echo": True}, "echo"), ({"max_tokens": "8"}, "max_tokens"),
    ({"stream_options": {"include_usage": True, "x": 1}}, "stream_options.x"), ({"min_tokens": 99}, "min_tokens"),
    ({"stop_token_ids": [10 ** 6]}, "stop_token_ids"), ({"max_tokens": 600}, "max_tokens")])
def test_unsupported_or_bad_fields_are_refused_by_name(served, body, field):
    url, _ = served
    r = _post(url, "/v1/completions", {"model": NAME, "prompt": "hi", "max_tokens": 8, **body})
    assert r.status_code == 400 and r.json()["error"]["param"] == field, r.text


def test_chat_fields_tools_and_malformed_json(served):
    url, _ = served
    base = {"model": NAME, "messages": [{"role": "user", "content": "Hi"}]}
    for extra, field in [({"tools": [{"type": "function"}]}, "tools"), ({"frequency_penalty": 1}, "frequency_penalty"),
                         ({"messages": [{"role": "tool", "content": "x"}]}, "messages.0.role")]:
        r = _post(url, "/v1/chat/completions", {**base, **extra})
        assert r.status_code == 400 and r.json()["error"]["param"] == field, r.text
    r = httpx.post(url + "/v1/completions", content=b"{not json", headers={"Authorization": f"Bearer {KEY}"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "body"


def test_api_key(served, caplog):
    url, _ = served
    body = {"model": NAME, "prompt": "hi", "max_tokens": 2}
    assert httpx.post(url + "/v1/completions", json=body).status_code == 401
    assert _post(url, "/v1/completions", body, key="wrong").status_code == 401
    assert _post(url, "/v1/completions", body).status_code == 200
    assert httpx.get(url + "/health").status_code == 200  # probes need no key
    assert KEY not in caplog.text


def test_metrics_and_openapi(served):
    url, _ = served

    def scrape():
        text = httpx.get(url + "/metrics").text
        return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(prd_jax_\S+) (\S+)$", text, re.M)}

    before = scrape()
    out = _post(url, "/v1/completions", {"model": NAME, "prompt": PROMPT, "max_tokens": 7, "temperature": 0}).json()
    _post(url, "/v1/completions", {"model": NAME, "prompt": "hi", "bad": 1})
    after = scrape()
    ok, bad = 'prd_jax_requests_total{endpoint="completions",status="200"}', \
        'prd_jax_requests_total{endpoint="completions",status="400"}'
    assert after[ok] - before.get(ok, 0) == 1 and after[bad] - before.get(bad, 0) == 1
    assert after["prd_jax_generation_tokens_total"] - before["prd_jax_generation_tokens_total"] == \
        out["usage"]["completion_tokens"]
    assert after["prd_jax_prompt_tokens_total"] - before["prd_jax_prompt_tokens_total"] == len(PROMPT)
    assert after["prd_jax_time_to_first_token_seconds_count"] - \
        before["prd_jax_time_to_first_token_seconds_count"] == 1
    assert after["prd_jax_slots_in_use"] == 0 and after["prd_jax_queued_requests"] == 0
    doc = httpx.get(url + "/openapi.json").json()
    schemas = doc["components"]["schemas"]
    assert {"stop_token_ids", "min_tokens", "stream_options"} <= set(schemas["CompletionRequest"]["properties"])
    assert set(doc["paths"]) >= {"/v1/completions", "/v1/chat/completions"}
    P.CompletionResponse.model_validate(out)


def test_closed_stream_cancels_its_row(served):
    url, engine = served
    before = engine.calls
    body = dict(model=NAME, prompt=PROMPT, max_tokens=400, temperature=0, ignore_eos=True, stream=True)
    with httpx.stream("POST", url + "/v1/completions", json=body, headers={"Authorization": f"Bearer {KEY}"}) as r:
        next(r.iter_lines())
    deadline = time.monotonic() + 30
    while engine.slots_in_use:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert engine.calls - before < 30  # 400 tokens in chunks of 4 would take 100 chunks


def test_full_queue_answers_429_with_retry_after_and_health_stays_up(model):
    """One slot, one queued request allowed: a row held in the slot (its chunk callback waits)
    and one waiting fill the queue; the next request gets 429 with `Retry-After` from the rule
    on the measured service time (a first row held 1.2 s: at least 2 s for one row ahead)."""
    cfg, params = model
    engine = Engine(cfg, params, ServedCharVocab(), max_rows=1, decode_chunk=4)
    hold = threading.Event()
    prompt = CharVocab().encode("hi")
    try:
        with running(engine, max_queued=1) as (url, _):
            slow = Row(prompt, 2, 0.0, 1.0, 0, seed=0, on_tokens=lambda _: time.sleep(1.2))
            engine.submit([slow])[0].result(timeout=120)
            held = engine.submit([Row(prompt, 2, 0.0, 1.0, 0, seed=1, on_tokens=lambda _: hold.wait(60))])[0]
            deadline = time.monotonic() + 60
            while engine.slots_in_use == 0:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            waiting = engine.submit([Row(prompt, 2, 0.0, 1.0, 0, seed=2)])[0]
            r = httpx.post(url + "/v1/completions", json={"model": NAME, "prompt": "hi", "max_tokens": 2})
            after = retry_after_s(engine.queued_rows, engine.mean_service_s, engine.max_rows)
            assert r.status_code == 429 and r.headers["retry-after"] == str(after)
            assert 2 <= after <= RETRY_AFTER_RANGE_S[1]  # ceil(1 row x >= 1.2 s / 1 slot)
            assert httpx.get(url + "/health").status_code == 200
            hold.set()
            assert held.result(timeout=60).ids and waiting.result(timeout=60).ids
    finally:
        hold.set()
        engine.stop()


def test_sigterm_drains_in_flight_requests_and_refuses_new_ones(model):
    cfg, params = model
    engine = Engine(cfg, params, ServedCharVocab(), max_rows=2, decode_chunk=1)
    gate = Gate()
    try:
        with running(engine, gate) as (url, server):
            body = dict(model=NAME, prompt=PROMPT, max_tokens=300, temperature=0, ignore_eos=True, stream=True)
            with httpx.stream("POST", url + "/v1/completions", json=body, timeout=120) as r:
                lines = r.iter_lines()
                next(lines)
                server.handle_exit(signal.SIGTERM, None)
                assert gate.draining
                assert httpx.get(url + "/health").status_code == 503
                late = httpx.post(url + "/v1/completions", json={"model": NAME, "prompt": "hi", "max_tokens": 2})
                ahead = engine.queued_rows + engine.slots_in_use  # the streamed row, in its slot
                assert late.status_code == 503 and ahead == 1
                assert late.headers["retry-after"] == str(retry_after_s(ahead, engine.mean_service_s, 2))
                rest = [x for x in lines if x]
            assert rest[-1] == "data: [DONE]"
            assert json.loads([x for x in rest if x.startswith("data: {")][-1][6:])["choices"][0]["finish_reason"] \
                == "length"
    finally:
        engine.stop()


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        return int(next(line for line in f if line.startswith("VmRSS")).split()[1]) / 1024


def test_load_with_faults(served):
    """200 requests from 50 clients: malformed JSON, unknown fields, over-long prompts, streams
    closed after the first chunk and clients gone mid-request among well-formed ones (plain and
    streamed). Every well-formed request gets its greedy answer alone; no slot leaks; the
    process's memory after the run is within 10% of before."""
    url, engine = served
    headers = {"Authorization": f"Bearer {KEY}"}
    prompts = [f"Q{i}: {i} + {2 * i} = ?\n" for i in range(10)]
    body = lambda i: dict(model=NAME, prompt=prompts[i % 10], max_tokens=6 + i % 10, temperature=0)  # noqa: E731
    alone = {}

    def one(i):
        kind = i % 10
        with httpx.Client(base_url=url, headers=headers, timeout=120) as c:
            if kind == 0:
                return i, c.post("/v1/completions", content=b'{"model": "tiny-char", "prompt": ').status_code
            if kind == 1:
                return i, c.post("/v1/completions", json={**body(i), "frobnicate": 1}).status_code
            if kind == 2:
                return i, c.post("/v1/completions", json={**body(i), "prompt": "x" * 600}).status_code
            if kind == 3:
                with c.stream("POST", "/v1/completions", json={**body(i), "max_tokens": 200, "stream": True}) as r:
                    next(r.iter_lines())
                return i, "closed"
            if kind == 4:
                try:
                    c.post("/v1/completions", json={**body(i), "max_tokens": 300}, timeout=0.05)
                except httpx.TimeoutException:
                    return i, "gone"
                return i, "answered"
            if kind == 5:
                events = c.post("/v1/completions", json={**body(i), "stream": True}).text.split("\n\n")
                return i, "".join(json.loads(e[6:])["choices"][0]["text"] for e in events if e.startswith("data: {"))
            return i, c.post("/v1/completions", json=body(i)).json()["choices"][0]["text"]

    for i in range(10):  # each prompt's answer alone
        alone[i] = _post(url, "/v1/completions", body(i)).json()["choices"][0]["text"]
    with concurrent.futures.ThreadPoolExecutor(50) as pool:  # a warm-up round: the programs the load meets
        list(pool.map(one, range(50)))
    gc.collect()
    before = _rss_mib()
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(50) as pool:
        results = dict(pool.map(one, range(200)))
    elapsed = time.monotonic() - t0
    deadline = time.monotonic() + 30
    while engine.slots_in_use or engine.queued_requests:
        assert time.monotonic() < deadline, (engine.slots_in_use, engine.queued_requests)
        time.sleep(0.05)
    gc.collect()
    after = _rss_mib()
    assert httpx.get(url + "/health").status_code == 200
    for i, got in results.items():
        kind = i % 10
        if kind in (0, 1, 2):
            assert got == 400, (i, got)
        elif kind == 3:
            assert got == "closed"
        elif kind != 4:
            assert got == alone[i % 10], (i, got, alone[i % 10])
    assert after <= 1.1 * before, (before, after)
    print(f"load: 200 requests, 50 clients, {elapsed:.1f} s; RSS {before:.0f} -> {after:.0f} MiB")


def test_mesh_warm_up_compiles_ahead_and_greedy_equals_one_device(model):
    """8 simulated devices (data=4, tensor=2: the pool's rows over `data`, heads over
    `tensor`): `warmup_max_tokens` compiles the mesh programs before the engine is ready, so
    the first requests compile nothing (XLA compiles counted by `jax.monitoring`), and the
    engine's greedy rows equal one device's."""
    cfg, params = model
    mesh = make_mesh("data=4,tensor=2")
    prompts = ["Hi there", "2 + 2 = ", "Q: why?\n", "Question: what is 12 + 30?\nA: "]  # 8, 8, 8, 30 chars
    rows = lambda: [Row(CharVocab().encode(p), 12 if i < 3 else 40, 0.0, 1.0, 0, seed=i)  # noqa: E731
                    for i, p in enumerate(prompts)]  # the last: a 32-wide prefill, cache width 128
    compiles = []

    def count(event, *_, **__):
        if event == BACKEND_COMPILE:
            compiles.append(event)
    jax.monitoring.register_event_duration_secs_listener(count)
    outs = []
    try:
        for m, p in ((None, params), (mesh, jax.device_put(params, param_shardings(cfg, mesh)))):
            engine = Engine(cfg, p, ServedCharVocab(), mesh=m, max_rows=4, decode_chunk=4, prompt_buckets=(16, 32),
                            warmup_max_tokens=40)
            try:
                deadline = time.monotonic() + 600
                while not engine.ready.wait(0.2):  # ready: what /health reports as 200
                    assert engine.error is None and time.monotonic() < deadline
                before, programs = len(compiles), engine.num_compilations
                outs.append([f.result(timeout=600).ids for f in engine.submit(rows())])
                assert len(compiles) == before and engine.num_compilations == programs, (m, compiles[before:])
            finally:
                engine.stop()
    finally:
        jax.monitoring.unregister_event_duration_listener(count)
    assert outs[0] == outs[1] and all(len(ids) >= 1 for ids in outs[0])
