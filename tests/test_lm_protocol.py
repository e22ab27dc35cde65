"""The declared LM seam (issue 49 §2, `prd_jax/operators/lm_protocol.py`): the in-graph and the
remote LM both implement `LanguageModel`; what differs between them (the model the rows name,
per-batch row fields and counters, closing) comes through it; a setting the remote LM cannot
honour is refused at setup with one line naming the field and what is allowed, before the
workdir's settings are written. (That `evaluate.py` holds no backend branch is a house rule in
tests/test_import_graph.py.)"""

from __future__ import annotations

import os

import jax
import ml_collections
import numpy as np
import pytest

from prd_jax.aot.programs import RecordingLM
from prd_jax.backends import BackendConfig, make_remote_lm
from prd_jax.backends.client import Answer
from prd_jax.backends.remote_lm import COUNTERS, RemoteHost, RemoteLM
from prd_jax.data import synthetic
from prd_jax.eval_setup import EvalSetup
from prd_jax.evaluate import evaluate
from prd_jax.model.config import NAMED_CONFIGS
from prd_jax.model.loader import smollm2_gguf_path
from prd_jax.model.tokenizer import Tokenizer
from prd_jax.operators.lm import ModelLM
from prd_jax.operators.lm_protocol import NO_STATS, LanguageModel, OperatorLM, forced_thinking
from prd_jax.operators.registry import build_spec
from prd_jax.sampling import Sampling, SamplingConfig

REMOTE = dict(kind="openai", base_url="http://127.0.0.1:9/v1", model="served-m", api="completions",
              endpoint="vllm", api_key_env="", tokenizer="smollm2-135m")


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.from_gguf(smollm2_gguf_path())


def _remote_config(operators, **backend):
    """An eval config of `operators` on two synthetic problems through the `REMOTE` backend."""
    config = ml_collections.ConfigDict(dict(
        task="gsm8k", model="tiny", seed=0, k_samples=2, batch_size=2, num_problems=2,
        sampling=dict(temperature=1.0, top_p=1.0, top_k=0), max_problem_tokens=64, templates="compact",
        operators=operators, backend={**REMOTE, **backend}))
    return config, synthetic.generate(2, 0, 1)


class _Scripted:
    """A test's scripted LM: the two calls alone."""

    def generate(self, prompts, lengths, keys, scfg, fanout=True, name="model call", live=None):
        raise NotImplementedError

    def next_logits(self, prompts, lengths, name="model call", live=None):
        raise NotImplementedError


def test_both_lms_implement_the_protocol(tok):
    cfg = NAMED_CONFIGS["tiny"]
    in_graph = ModelLM(None, cfg, 0)
    remote, _ = make_remote_lm(BackendConfig.from_config(REMOTE), tok)
    assert isinstance(remote, RemoteLM)
    for lm in (in_graph, remote):
        assert isinstance(lm, LanguageModel) and isinstance(lm, OperatorLM)
    # what operators alone call: a scripted fake and the AOT recorder are OperatorLMs, not LanguageModels
    for lm in (_Scripted(), RecordingLM(in_graph, [])):
        assert isinstance(lm, OperatorLM) and not isinstance(lm, LanguageModel)
    assert not isinstance(object(), OperatorLM)
    # what the harness reads through the seam
    assert in_graph.served("runs/sft@300") == "runs/sft@300" and in_graph.via() == ""
    assert remote.served("runs/sft@300") == "served-m" and remote.via() == "http://127.0.0.1:9/v1 (vllm)"
    in_graph.begin(4)
    assert in_graph.stats() is NO_STATS and NO_STATS.rows == {} and NO_STATS.counts == {}
    remote.close()


class _Client:
    """Answers each body in order from `answers` (an `Answer` per request); records nothing else."""

    def __init__(self, answers):
        self.answers, self.stopped = list(answers), None

    def post_many(self, path, bodies, check, tags=None):
        out, self.answers = self.answers[:len(bodies)], self.answers[len(bodies):]
        return out

    def check(self):
        pass

    def scrub(self, text):
        return text

    def close(self):
        self.closed = True


def _ok(text_ids, completion_tokens):
    return Answer(True, body={"choices": [{"text": "", "token_ids": text_ids, "finish_reason": "stop"}],
                              "usage": {"prompt_tokens": 5, "completion_tokens": completion_tokens}})


def test_remote_stats_are_row_fields_and_request_counts(tok):
    """Two problems x two samples: problem 0's answers succeed (3 + 4 tokens billed), problem 1's
    first fails; `stats` gives each problem's row fields and the batch's 4 requests."""
    backend = BackendConfig.from_config(REMOTE)
    client = _Client([_ok([7, 8, 9], 3), _ok([7, 8, 9, 10], 4), Answer(False, error="http 500"), _ok([7], 1)])
    lm = RemoteLM(RemoteHost(backend, tok, client))
    lm.begin(2)
    prompts, lengths = np.full((2, 3), 5, np.int32), np.full((2,), 3, np.int32)
    lm.host.generate(prompts, lengths, np.zeros((2, 2), np.uint32), np.ones((2,), bool),
                     scfg=SamplingConfig.of(Sampling(), 8, num_samples=2), name="draft")
    stats = lm.stats()
    assert stats.counts == {"requests": 4}
    assert sorted(stats.rows) == [0, 1]
    first, second = stats.rows[0], stats.rows[1]
    assert set(first["remote"]) == set(COUNTERS)
    assert first["remote"]["requests"] == 2 and first["remote"]["completion_tokens"] == 3 + 4
    assert "failed" not in first and [c["completion_tokens"] for c in first["remote_calls"]] == [3, 4]
    assert second["remote"]["failed"] == 1 and second["failed"] == ["http 500"]
    assert second["remote"]["completion_tokens"] == 1
    lm.begin(2)  # a new batch: nothing counted yet, every problem still gets its (zero) fields
    empty = lm.stats()
    assert empty.counts == {"requests": 0} and empty.rows[1]["remote"]["requests"] == 0
    lm.close()
    assert client.closed


def test_forced_thinking_names_nested_fields():
    spec = build_spec(dict(type="pdr", schedule=(2, 1), distill="shared_topk", k=1, selector="self_pointwise",
                           judge=dict(domain="math", max_new_tokens=64, think_budget=32), max_new_tokens=256,
                           think_budget=128, kappa=128, kappa_think=64))
    assert sorted(forced_thinking(spec, "config.operators[1]")) == [
        ("config.operators[1].judge.think_budget", 32), ("config.operators[1].kappa_think", 64),
        ("config.operators[1].think_budget", 128)]
    assert forced_thinking(build_spec(dict(type="long_cot", max_new_tokens=64)), "x") == []


def test_think_budget_on_a_remote_config_is_refused_at_setup(tmp_path):
    operators = [dict(type="long_cot", max_new_tokens=64), dict(type="long_cot", max_new_tokens=64, think_budget=32)]
    config, rows = _remote_config(operators)
    expected = ("config.operators[1].think_budget=32: a remote LM cannot close a thinking block at a token budget "
                "(the server decodes each call whole); allowed: 0 (a server-side budget is "
                "config.backend.thinking_budget or reasoning_effort, where endpoint 'vllm' takes one)")
    with pytest.raises(ValueError) as refused:
        EvalSetup.from_config(config).open_lm(str(tmp_path), progress=False)
    assert str(refused.value) == expected and "\n" not in expected
    workdir = tmp_path / "ev"
    with pytest.raises(ValueError, match=r"^config\.operators\[1\]\.think_budget=32: .*allowed: 0"):
        evaluate(config, str(workdir), rows=rows, progress=False)
    assert not os.path.exists(workdir / "settings.json")  # refused before the workdir's settings were written
    # a judge's budget and the PDR summary's are named by their path
    pdr = dict(type="pdr", schedule=(2, 1), distill="shared_topk", k=1, selector="self_pointwise",
               judge=dict(domain="math", max_new_tokens=64, think_budget=16), max_new_tokens=64,
               candidate_max_tokens=32, truncation_head=8)
    config, _ = _remote_config([pdr])
    with pytest.raises(ValueError, match=r"^config\.operators\[0\]\.judge\.think_budget=16: "):
        EvalSetup.from_config(config).open_lm(str(tmp_path), progress=False)
    # in-graph, the decoder closes the block itself: the same specs are accepted
    spec = build_spec(operators[1])
    ModelLM(None, NAMED_CONFIGS["tiny"], 0).check([spec], Sampling())


@pytest.mark.parametrize("backend,field,refused", [
    (dict(api="chat", endpoint="gemini"), dict(sampling=dict(temperature=1.0, top_p=1.0, top_k=20)),
     r"^config\.sampling\.top_k=20: endpoint 'gemini' takes no top-k; allowed: 0 \(off\)$"),
    (dict(api="chat", endpoint="openai_reasoning"), dict(sampling=dict(temperature=0.6, top_p=0.95, top_k=0)),
     r"^config\.sampling\.temperature=0\.6, top_p=0\.95: endpoint 'openai_reasoning' takes no temperature / top-p"
     r".*allowed: temperature=1\.0, top_p=1\.0$"),
    (dict(), dict(sampling=dict(temperature=1.0, top_p=1.0, top_k=0, max_rows=8)),
     r"^config\.sampling\.max_rows=8 shapes the in-graph decoder; .*allowed: 0 "),
    (dict(), dict(sampling=dict(temperature=1.0, top_p=1.0, top_k=0, decode_layers="scan")),
     r"^config\.sampling\.decode_layers='scan' shapes the in-graph decoder; .*allowed: 'unrolled' "),
    (dict(), dict(dtype="bfloat16"), r"^config\.dtype='bfloat16' sets up the in-graph model; .*allowed: ''$"),
    (dict(), dict(mesh="data=-1"), r"^config\.mesh='data=-1' sets up the in-graph model; .*allowed: ''$"),
    (dict(api="chat", endpoint="vllm"), dict(reasoning_effort="low"),
     r"^config\.reasoning_effort='low' is a variable of the local chat template; .*allowed: None "),
    (dict(api="chat", endpoint="chat"), dict(enable_thinking=False),
     r"^config\.enable_thinking=False: endpoint 'chat' takes no chat_template_kwargs; allowed: None$"),
])
def test_other_settings_a_remote_lm_cannot_honour_are_refused(tmp_path, tok, backend, field, refused):
    config, _ = _remote_config([dict(type="long_cot", max_new_tokens=64)], **backend)
    for k, v in field.items():
        setattr(config, k, v)
    with pytest.raises(ValueError, match=refused) as error:
        EvalSetup.from_config(config).open_lm(str(tmp_path), progress=False)
    assert "\n" not in str(error.value)
    config.backend.kind = "jax"  # in-graph the same config is accepted (the fields are the decoder's own)
    in_graph = ModelLM(None, NAMED_CONFIGS["tiny"], 0)
    assert EvalSetup.from_config(config).with_lm(in_graph, tok).lm is in_graph


def test_honoured_settings_pass_and_reach_the_remote_lm(tmp_path):
    """Greedy with a top-k on an endpoint without one (top-k means nothing greedy), and the
    GPT-OSS template variable in token mode (the local template renders it) are accepted."""
    config, _ = _remote_config([dict(type="long_cot", max_new_tokens=64)], api="chat", endpoint="gemini")
    config.sampling = dict(temperature=0.0, top_p=1.0, top_k=20)
    assert isinstance(EvalSetup.from_config(config).open_lm(str(tmp_path), progress=False).lm, RemoteLM)
    config, _ = _remote_config([dict(type="long_cot", max_new_tokens=64)])
    config.reasoning_effort, config.enable_thinking = "low", False
    setup = EvalSetup.from_config(config).open_lm(str(tmp_path), progress=False)
    assert setup.tokenizer.chat_template_vars == {"reasoning_effort": "low", "enable_thinking": False}
    assert setup.lm.host.tok is setup.tokenizer and setup.lm.host.template_kwargs == {}
    assert jax.tree.leaves(setup.lm) == []  # a pytree with no leaves: the host is static
