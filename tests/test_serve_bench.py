"""The peer benchmark's arithmetic (issue 46 §3, `benchmarks/serve_throughput.py --peer
transformers`): one streamed request's time to first token and usage, a server's figures and
the two servers' comparison from synthetic timings, the table, the flags. No server runs."""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace as NS

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import serve_throughput as st  # noqa: E402


def result(tokens, ttft, latency, text="a", finish="length", prompt_tokens=50):
    return {"tokens": tokens, "prompt_tokens": prompt_tokens, "finish": finish, "text": text, "ttft": ttft,
            "latency": latency}


def test_side_figures_from_synthetic_timings():
    results = [result(10, 0.1, 1.0, finish="stop"), result(20, 0.2, 2.0), result(30, 0.3, 3.0),
               result(40, 0.4, 4.0)]
    f = st.side_figures(4.0, results, max_new=40)
    assert f["useful_tokens"] == 100 and f["useful_tokens_per_s"] == 25.0  # 100 tokens / 4 s
    # numpy's linear percentile of 0.1..0.4: p50 between 0.2 and 0.3; p95 at index 2.85
    assert f["ttft_p50_s"] == pytest.approx(0.25) and f["ttft_p95_s"] == pytest.approx(0.385)
    assert f["latency_p50_s"] == pytest.approx(2.5) and f["latency_p95_s"] == pytest.approx(3.85)
    assert f["rows_at_cap"] == 1 and f["finish_stop"] == 1 and f["requests"] == 4


def test_peer_comparison_ratio_and_agreement():
    prd = st.side_figures(2.0, [result(30, 0.5, 1.0, "x"), result(30, 0.5, 1.0, "y")], 64)  # 30 tokens/s
    peer = st.side_figures(4.0, [result(30, 1.0, 2.0, "x"), result(29, 1.0, 2.0, "z", prompt_tokens=51)], 64)
    c = st.peer_comparison(prd, peer, [result(30, 0, 0, "x"), result(30, 0, 0, "y")],
                           [result(30, 0, 0, "x"), result(29, 0, 0, "z", prompt_tokens=51)])
    assert peer["useful_tokens_per_s"] == 14.75  # 59 / 4
    assert c["ratio"] == round(30.0 / 14.75, 3) == 2.034
    assert c["ttft_p50_ratio"] == 0.5
    assert (c["same_text"], c["same_tokens"], c["prompts_match"]) == (1, 1, 1)
    table = st.peer_table({"transformers serve": peer, "prd-jax serve": prd}).splitlines()
    assert len(table) == 4 and table[2].startswith("| transformers serve | 2 | 4.0 | 59 | 14.75 | 1.00 |")
    assert table[3].startswith("| prd-jax serve | 2 | 2.0 | 60 | 30.00 | 0.50 |")


class Clock:
    """perf_counter stand-in: each call returns the next of `times`."""

    def __init__(self, times):
        self.times = iter(times)

    def __call__(self):
        return next(self.times)


def chunk(content=None, finish=None, usage=None, role=None):
    choices = [] if content is None and finish is None and role is None else [
        NS(delta=NS(content=content, role=role), finish_reason=finish)]
    return NS(choices=choices, usage=usage)


def fake_client(chunks, sent):
    def create(**kw):
        sent.append(kw)
        return iter(chunks)

    return NS(chat=NS(completions=NS(create=create)))


def test_stream_request_times_the_first_text_chunk_and_reads_the_usage(monkeypatch):
    # a role chunk with empty text (not a token), two text chunks, the finish, then usage alone
    chunks = [chunk(content="", role="assistant"), chunk(content="Hel"), chunk(content="lo"),
              chunk(content="", finish="stop"), chunk(usage=NS(completion_tokens=3, prompt_tokens=12))]
    monkeypatch.setattr(st.time, "perf_counter", Clock([10.0, 11.5, 14.0]))  # sent, first text, end
    sent = []
    r = st.stream_request(fake_client(chunks, sent), "m", [{"role": "user", "content": "hi"}], 8)
    assert r == {"tokens": 3, "prompt_tokens": 12, "finish": "stop", "text": "Hello", "ttft": 1.5, "latency": 4.0}
    assert sent[0]["temperature"] == 0.0 and sent[0]["stream"] and sent[0]["max_tokens"] == 8
    assert sent[0]["stream_options"] == {"include_usage": True}


def test_stream_request_without_usage_fails(monkeypatch):
    monkeypatch.setattr(st.time, "perf_counter", Clock([0.0, 1.0, 2.0]))
    with pytest.raises(RuntimeError, match="without a usage chunk"):
        st.stream_request(fake_client([chunk(content="x", finish="length")], []), "m", [], 8)


def test_both_servers_listen_on_loopback_only():
    args = st.build_parser().parse_args(["--peer", "transformers", "--max-batch-rows", "32",
                                         "--prompt-buckets", "64"])
    prd, peer = st.serve_command(args, 8123), st.peer_command("/m", 8124, st.peer_kv_tokens(args))
    assert prd[prd.index("--host") + 1] == "127.0.0.1" and prd[prd.index("--port") + 1] == "8123"
    assert peer[peer.index("--host") + 1] == "127.0.0.1" and "--continuous-batching" in peer
    assert peer[peer.index("serve") + 1] == "/m"
    # the peer's KV cache holds every client's row: 32 clients x (64-token bucket + 256 new) = 10240 tokens
    assert st.peer_kv_tokens(args) == 32 * (64 + 256)
    assert peer[peer.index("--cb-num-blocks") + 1] == str(10240 // 32)
    assert peer[peer.index("--cb-block-size") + 1] == "32"
    assert st.peer_kv_blocks(33) == 2 and st.peer_kv_blocks(32) == 1


@pytest.mark.parametrize("argv, message", [
    (["--peer", "vllm"], "argument --peer: invalid choice: 'vllm'"),
    (["--peer", "transformers", "--only", "serve"], "--peer compares two servers"),
    (["--peer", "transformers", "--peer-warmup", "-1"], "--peer-warmup=-1: must be >= 0"),
    (["--peer", "transformers", "--peer-kv-tokens", "-5"], "--peer-kv-tokens=-5: must be >= 0"),
])
def test_bad_peer_flags_are_refused(argv, message, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["serve_throughput.py", *argv])
    with pytest.raises(SystemExit) as e:
        st.main()
    assert e.value.code == 2 and message in capsys.readouterr().err
