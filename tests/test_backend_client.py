"""The remote backend's config, cache and retry rules (no network), and its behaviour against
a scripted faulty endpoint on loopback (`tests/fake_openai.py`): retries, failures counted
with their reasons, resume after SIGKILL without paying twice, and the key in no file."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from prd_jax.backends.cache import RequestCache, request_key
from prd_jax.backends.client import backoff_s, retry_after_s
from prd_jax.backends.config import BackendConfig, default_backend, with_backend
from prd_jax.config_io import apply_overrides, load_config
from servers import free_port

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
GSM8K = os.path.join(ROOT, "configs", "eval", "smollm2_gsm8k.py")
KEY = "sk-test-5f3a9c1e77d04b2a"


def _remote(**kw):
    fields = dict(kind="openai", base_url="http://127.0.0.1:9/v1", model="m", api="chat", api_key_env="")
    fields.update(kw)
    return BackendConfig.from_config(fields)


@pytest.mark.parametrize("field,value,needle", [
    ("kind", "vllm", "config.backend.kind='vllm'; allowed: ('jax', 'openai')"),
    ("base_url", "localhost:8000", "config.backend.base_url"),
    ("api", "responses", "config.backend.api='responses'; allowed: ('completions', 'chat')"),
    ("token_param", "max_output_tokens", "config.backend.token_param"),
    ("max_concurrency", 0, "config.backend.max_concurrency=0"),
    ("reasoning_effort", "max", "config.backend.reasoning_effort='max'"),
    ("api_key_env", "sk-live-abc", "config.backend.api_key_env"),
])
def test_bad_backend_fields_are_refused_by_name(field, value, needle):
    with pytest.raises(ValueError) as e:
        _remote(**{field: value})
    assert needle in str(e.value)


def test_unknown_field_and_unset_key_variable_are_refused(monkeypatch):
    with pytest.raises(ValueError, match=r"unknown fields \['api_key'\]"):
        BackendConfig.from_config(dict(kind="openai", api_key="sk-x"))
    monkeypatch.delenv("PRD_TEST_UNSET_KEY", raising=False)
    backend = _remote(api_key_env="PRD_TEST_UNSET_KEY")
    with pytest.raises(ValueError, match="PRD_TEST_UNSET_KEY.*not set"):
        backend.api_key()


def test_every_eval_config_takes_backend_overrides():
    config = apply_overrides(with_backend(load_config(GSM8K)),
                             ["--config.backend.kind=openai", "--config.backend.base_url=http://127.0.0.1:8000/v1",
                              "--config.backend.model=smollm2-135m", "--config.backend.api=completions",
                              "--config.backend.max_concurrency=4"])
    backend = BackendConfig.from_config(config.backend)
    assert (backend.kind, backend.api, backend.max_concurrency, backend.max_retries) == ("openai", "completions", 4, 8)
    assert set(default_backend().keys()) == set(config.backend.keys())
    with pytest.raises(ValueError, match="no field 'backend.modle'"):
        apply_overrides(with_backend(load_config(GSM8K)), ["--config.backend.modle=x"])


def test_retry_after_is_honoured_and_backoff_grows():
    assert retry_after_s("3") == 3.0 and retry_after_s(None) == 0.0
    assert 9.0 < retry_after_s(time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 10))) <= 10.0
    for attempt in range(6):
        d = backoff_s(attempt, 1.0)
        assert 0.5 * 2 ** attempt <= d <= 2 ** attempt  # jitter: half to all of base * 2^attempt
        assert backoff_s(attempt, 0.01, retry_after=5.0) == 5.0  # never sooner than Retry-After
    assert backoff_s(20, 1.0) <= 60.0


def test_request_cache_survives_a_torn_line_and_ignores_no_content(tmp_path):
    path = str(tmp_path / "requests.jsonl")
    cache = RequestCache(path)
    k1, k2 = request_key("chat/completions", {"a": 1, "b": 2}), request_key("chat/completions", {"b": 2, "a": 1}, "s1")
    assert k1 == request_key("chat/completions", {"b": 2, "a": 1}) and k1 != k2  # key order is irrelevant, the tag is not
    cache.put(k1, {"x": 1})
    cache.close()
    with open(path, "a") as f:
        f.write('{"key": "abc", "resp')  # a run killed mid-write
    again = RequestCache(path)
    assert again.get(k1) == {"x": 1} and again.get(k2) is None and len(again) == 1


# ----------------------------------------------------------------------------- against a faulty endpoint

def _start_fake(tmp_path, *args):
    port = free_port()
    log = str(tmp_path / f"fake_{port}.jsonl")
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "fake_openai.py"), "--port", str(port), "--log", log,
                             *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import httpx
    for _ in range(100):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc, port, log
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("fake endpoint did not start")


def _log(path) -> list:
    with open(path) as f:
        return [json.loads(line) for line in f]


def _write_config(tmp_path, port, **backend) -> str:
    fields = dict(kind="openai", base_url=f"http://127.0.0.1:{port}/v1", model="fake-o", api="chat",
                  api_key_env="PRD_FAKE_KEY", timeout_s=1.5, max_retries=3, retry_base_s=0.05, max_concurrency=4,
                  tokenizer="smollm2-135m", endpoint="openai_reasoning")
    fields.update(backend)
    path = tmp_path / "fake_eval.py"
    path.write_text(f'''
import ml_collections
def get_config(arg=None):
    c = ml_collections.ConfigDict()
    c.model = "smollm2-135m"
    c.model_path = ""
    c.task = "gsm8k"
    c.data_dir = ""
    c.num_problems = 6
    c.k_samples = 2
    c.batch_size = 3
    c.seed = 0
    c.sampling = ml_collections.ConfigDict(dict(temperature=1.0, top_p=1.0, top_k=0))
    c.max_problem_tokens = 192
    c.operators = [dict(type="long_cot", max_new_tokens=64),
                   dict(type="pdr", schedule=(2, 1), distill="shared_topk", k=2, selector="random",
                        max_new_tokens=48, candidate_max_tokens=32, truncation_head=8)]
    c.backend = ml_collections.ConfigDict({fields!r})
    return c
''')
    return str(path)


def _eval(config, workdir, key, *overrides, timeout=300):
    env = dict(os.environ, PRD_FAKE_KEY=key, JAX_PLATFORMS="cpu", XLA_FLAGS="")
    return subprocess.run([sys.executable, "-m", "prd_jax.cli", "eval", "--config", config, "--workdir", workdir,
                           *overrides], env=env, capture_output=True, text=True, timeout=timeout)


def _rows(workdir) -> list:
    with open(os.path.join(workdir, "results.jsonl")) as f:
        return [json.loads(line) for line in f]


def _files_text(workdir) -> str:
    out = []
    for root, _, files in os.walk(workdir):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                out.append(f.read().decode("utf-8", "replace"))
    return "\n".join(out)


@pytest.mark.slow
def test_faults_are_retried_or_counted_and_a_rerun_pays_nothing_twice(tmp_path):
    proc, port, log = _start_fake(tmp_path, "--faults", "--key", KEY, "--stall", "3")
    try:
        config = _write_config(tmp_path, port)
        workdir = str(tmp_path / "ev")
        # No retries: every scripted fault fails its row, with its reason; nothing crashes.
        first = _eval(config, workdir, KEY, "--config.backend.max_retries=0")
        assert first.returncode == 0, first.stderr[-2000:]
        rows = _rows(workdir)
        assert len(rows) == 2 * 6 * 2
        failed = [r for r in rows if r.get("failed")]
        reasons = " ".join(" ".join(r["failed"]) for r in failed)
        for needle in ("http 429", "http 500", "http 503", "timeout", "malformed body"):
            assert needle in reasons, (needle, reasons[:500])
        assert all(not r.get("failed") for r in rows if r not in failed)
        with open(os.path.join(workdir, "summary.md")) as f:
            assert "requests failed" in f.read()
        answered_first = {e["hash"] for e in _log(log) if e["status"] == 200}
        sent_first = len(_log(log))
        # With retries: the failed rows complete; no answered request is sent again.
        second = _eval(config, workdir, KEY)
        assert second.returncode == 0, second.stderr[-2000:]
        from prd_jax.evaluate import latest_rows
        latest = latest_rows(_rows(workdir))
        assert len(latest) == 24 and not any(r.get("failed") for r in latest)
        entries = _log(log)
        resent = [e for e in entries[sent_first:] if e["hash"] in answered_first]
        counts = {}
        for e in entries:
            if e["status"] == 200:
                counts[e["hash"]] = counts.get(e["hash"], 0) + 1
        assert max(counts.values()) == 1 and not resent
        # Bad answers are counted per operator; budgets are the server's bill (7 hidden tokens each).
        remote = [r["remote"] for r in latest]
        assert sum(x["empty"] for x in remote) > 0 and sum(x["length"] for x in remote) > 0
        for r in latest:
            if r["operator"].startswith("long_cot"):
                assert r["b_total"] == r["calls"][0]["out_tokens"] and r["calls"][0]["out_tokens"] >= 7
        # A wrong key: every row fails with the 401; the key itself reaches no file.
        bad = str(tmp_path / "bad")
        wrong = _eval(config, bad, "sk-wrong-key-000111")
        assert wrong.returncode == 0, wrong.stderr[-2000:]
        assert all(r.get("failed") and "http 401" in r["failed"][0] for r in _rows(bad))
        for d in (workdir, bad):
            text = _files_text(d)
            assert KEY not in text and "sk-wrong-key-000111" not in text
        assert KEY not in first.stdout + first.stderr + second.stdout + second.stderr
    finally:
        proc.kill()


@pytest.mark.slow
def test_sigkill_mid_run_then_resume_sends_no_answered_request_again(tmp_path):
    proc, port, log = _start_fake(tmp_path, "--delay", "0.25")
    try:
        config = _write_config(tmp_path, port, api_key_env="", max_concurrency=2)
        workdir = str(tmp_path / "ev")
        env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="")
        run = subprocess.Popen([sys.executable, "-m", "prd_jax.cli", "eval", "--config", config, "--workdir", workdir],
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 240
        while time.time() < deadline and sum(e["status"] == 200 for e in (_log(log) if os.path.exists(log) else [])) < 20:
            time.sleep(0.1)
        run.send_signal(signal.SIGKILL)
        run.wait()
        with open(os.path.join(workdir, "requests.jsonl")) as f:
            cached = {json.loads(line)["response"]["id"] for line in f if line.endswith("\n")}
        sent_before = len(_log(log))
        assert len(cached) >= 18  # answers arrived and were kept before the kill
        done = _eval(config, workdir, "")
        assert done.returncode == 0, done.stderr[-2000:]
        rerun = _log(log)[sent_before:]
        assert rerun and not [e for e in rerun if e["hash"] in cached]  # nothing answered is sent again
        from prd_jax.evaluate import latest_rows
        assert len(latest_rows(_rows(workdir))) == 24
    finally:
        proc.kill()


def test_estimate_counts_requests_and_tokens_before_sending(capsys):
    from prd_jax.cli import main

    with pytest.raises(SystemExit) as done:
        main(["compile", "--config", GSM8K, "--estimate", "--config.backend.kind=openai",
              "--config.backend.base_url=http://127.0.0.1:9/v1", "--config.backend.model=m",
              "--config.backend.api=chat", "--config.backend.api_key_env=PRD_UNSET_FOR_ESTIMATE",
              "--config.backend.price_output_per_mtok=2.0"])
    assert done.value.code == 0
    table = capsys.readouterr().out
    rows = {line.split(" | ")[0].strip("| ").split("(")[0]: line.split(" | ") for line in table.splitlines()
            if line.startswith("| ") and "operator" not in line}
    # 4 problems, k = 1: Long-CoT 1 call each (192 tokens), SR 2 calls (96), PDR (4, 1) 4 + 1 (96), random-k ranks
    # for free. Prompt widths are padded upper bounds, so only completion tokens are checked exactly.
    assert [float(rows[op][1]) for op in ("long_cot", "sr", "pdr")] == [4, 8, 20]
    assert [float(rows[op][3]) for op in ("long_cot", "sr", "pdr")] == [768, 768, 1920]
    assert float(rows["total"][4].strip(" |")) == round((768 + 768 + 1920) * 2.0 / 1e6, 2)
