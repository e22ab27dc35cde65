"""A real third-party server (DESIGN principle 10): Long-CoT, SR and PDR in chat mode against
`transformers serve` (transformers' own OpenAI-compatible server, FastAPI) serving SmolLM2 as
`prd-jax export` writes it. Every row completes, and each row's budgets are the server's
reported usage, request by request. The requests follow `backends.endpoints` row
`transformers` (only fields its params class accepts: an unknown one is a 422)."""

import json
import os
import subprocess
import sys

import ml_collections
import pytest

from servers import free_port, wait_healthy

pytestmark = [pytest.mark.slow, pytest.mark.peer]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(base_url, model name) of `transformers serve` on loopback, serving `prd-jax export`'s directory."""
    pytest.importorskip("torch")
    pytest.importorskip("fastapi")

    out = str(tmp_path_factory.mktemp("smollm2_hf"))
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="")
    done = subprocess.run([sys.executable, "-m", "prd_jax.cli", "export", "--out", out], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    port = free_port()
    log = open(os.path.join(out, "..", "serve.log"), "w")
    proc = subprocess.Popen([sys.executable, "-m", "transformers.cli.transformers", "serve", out, "--host",
                             "127.0.0.1", "--port", str(port), "--device", "cpu", "--dtype", "float32"],
                            env=dict(env, CUDA_VISIBLE_DEVICES=""), stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc, 180, "transformers serve")
        yield f"http://127.0.0.1:{port}/v1", out
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_long_cot_sr_pdr_in_chat_mode_against_transformers_serve(served, tmp_path):
    from prd_jax.evaluate import evaluate

    base_url, model = served
    config = ml_collections.ConfigDict(dict(
        model="smollm2-135m", model_path="", task="gsm8k", data_dir="", num_problems=1, k_samples=1, batch_size=1,
        seed=0, sampling=dict(temperature=1.0, top_p=1.0, top_k=0), max_problem_tokens=192,
        operators=[dict(type="long_cot", max_new_tokens=24),
                   dict(type="sr", rounds=1, max_new_tokens=24, candidate_max_tokens=16, truncation_head=4),
                   dict(type="pdr", schedule=(2, 1), distill="random_k", k=1, selector="random", max_new_tokens=24,
                        candidate_max_tokens=16, truncation_head=4)],
        backend=dict(kind="openai", base_url=base_url, model=model, endpoint="transformers", api_key_env="",
                     max_concurrency=2, timeout_s=120.0, max_retries=2, tokenizer=model)))
    workdir = str(tmp_path / "ev")
    evaluate(config, workdir, progress=False)
    with open(os.path.join(workdir, "results.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    assert sorted(r["operator"].split("(")[0] for r in rows) == ["long_cot", "pdr", "sr"]
    expected_requests = {"long_cot": 1, "sr": 2, "pdr": 3}  # PDR (2, 1): two drafts, one refinement
    for r in rows:
        assert not r.get("failed") and r["remote"]["failed"] == 0, r.get("failed")
        calls, billed = r["calls"], r["remote_calls"]
        assert len(billed) == expected_requests[r["operator"].split("(")[0]]
        assert all(c["finish_reason"] in ("stop", "length") and c["reasoning_tokens"] == 0 for c in billed)
        # the row's budgets are the server's usage, request by request
        assert sum(c["out_tokens"] for c in calls) == sum(c["completion_tokens"] for c in billed) == r["b_total"]
        assert sum(c["in_tokens"] for c in calls) == sum(c["prompt_tokens"] for c in billed)
        assert r["b_total_io"] == sum(c["prompt_tokens"] + c["completion_tokens"] for c in billed)
        assert all(0 < c["completion_tokens"] <= 24 and c["prompt_tokens"] > 20 for c in billed)
        assert r["model"] == model
