"""Judge ratings in the call log, the result rows and `results.load_calls` (issue 47 §3).

A rule-following fake model (in-graph, and the same rule behind a fake remote endpoint)
writes drafts `@d@`, refines that copy the first candidate their workspace quotes, and
judge verdicts in rating tags whose values depend on the quoted answers and on the prompt
length. The model logs every judge completion it writes; the tests re-parse those texts
with the judges' own parser (`RatingParser`) and require each stored call's ratings to be
the ones parsed from the completion of its own prompt (the problem and the candidates it
names), so a rating moved to another call, another candidate or another problem fails.
"""

import re

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prd_jax import evaluate as evaluate_module
from prd_jax import eval_setup, fileio, results
from prd_jax.backends.client import Answer
from prd_jax.backends.config import BackendConfig
from prd_jax.backends.remote_lm import RemoteHost, RemoteLM
from prd_jax.data.synthetic import CharVocab
from prd_jax.operators.best_of_n import BestOfN
from prd_jax.operators.budget import CallLog, group
from prd_jax.operators.judges import TAGS, RatingParser
from prd_jax.operators.lm import ModelLM
from prd_jax.operators.pdr import PDR
from prd_jax.operators.runner import encode_problems, make_context, run_operator
from prd_jax.operators.specs import Judge, Sampling
from prd_jax.sampling import SampleOutput
from prd_jax.tasks import get_task
from fakes import tiny_eval

TOK = CharVocab()
MARK = re.compile(r"@(\d)@")
LOG = []  # (call name, prompt text, completion text) of every judge row the fakes answered
JUDGE = dict(max_new_tokens=96)


def rating_of(answer: int, prompt: str) -> int:
    """The fake judge's rating of a candidate whose answer is `answer`, in a prompt of this length."""
    return 1 + (7 * answer + len(prompt)) % 10


def completion(name: str, prompt: str, draft: int) -> str:
    """What the fake model writes for call `name` on `prompt`; `draft` is a draft's answer."""
    quoted = [int(d) for d in MARK.findall(prompt)]
    if "judge" in name:
        if "pairwise" in name or name == "adaptive_pdr.judge":
            if len(quoted) != 2:
                return ""  # an unused tournament slot (not live)
            a, b = (rating_of(x, prompt) for x in quoted)
            text = f"A looks {'better' if a > b else 'no better'}. <rating_A>{a}</rating_A> <rating_B>{b}</rating_B>"
        else:
            text = f"Checked. <rating>{rating_of(quoted[0], prompt)}</rating>"
        LOG.append((name, prompt, text))
        return text
    if name.endswith("refine"):
        return f"@{quoted[0]}@"
    return f"@{draft}@"


def _rows(prompts, lengths, texts_of, n):
    """Tokens `[R, n]` and lengths `[R]` of `texts_of(i, prompt text)` for each left-padded prompt."""
    prompts, lengths = np.asarray(prompts), np.asarray(lengths)
    width = prompts.shape[1]
    out = []
    for i in range(prompts.shape[0]):
        prompt = TOK.decode(prompts[i, width - int(lengths[i]):].tolist())
        out += texts_of(prompt)
    tok = np.zeros((len(out), n), np.int32)
    length = np.zeros((len(out),), np.int32)
    for r, text in enumerate(out):
        ids = TOK.encode(text)[:n]
        tok[r, :len(ids)], length[r] = ids, len(ids)
    return tok, length


@flax.struct.dataclass
class RuleLM(ModelLM):
    """In-graph fake (the decoder's host side, its model calls replaced): sample j of a draft
    call answers `@j@` (`completion`)."""

    def generate(self, prompts, lengths, keys, scfg, fanout=True, name="", live=None):
        m, n = scfg.num_samples, scfg.max_new_tokens
        rows = prompts.shape[0] * m

        def host(p, l):
            return _rows(p, l, lambda prompt: [completion(name, prompt, j) for j in range(m)], n)

        tok, length = jax.pure_callback(host, (jax.ShapeDtypeStruct((rows, n), jnp.int32),
                                               jax.ShapeDtypeStruct((rows,), jnp.int32)), prompts, lengths)
        return SampleOutput(tok, jnp.zeros(tok.shape), length, jnp.zeros((rows,), bool))

    def next_logits(self, prompts, lengths, name="", live=None):
        return jnp.zeros((prompts.shape[0], TOK.vocab_size))  # never read: every verdict parses


def parsed_log(problem: str) -> dict:
    """{(kind, quoted answers): ratings} re-parsed from the logged completions of `problem`'s
    judge prompts with the judges' parser; a key seen twice must parse the same."""
    parser, table = RatingParser(TOK), {}
    for name, prompt, text in LOG:
        if problem not in prompt:
            continue
        kind = "pointwise" if name == "judge.pointwise" else "pairwise"
        ids = TOK.encode(text)
        got = parser(np.asarray([ids]), np.asarray([len(ids)]), tags=TAGS[kind])[0].tolist()
        key = (kind, tuple(int(d) for d in MARK.findall(prompt)))
        assert table.setdefault(key, got) == got, (key, table[key], got)
    return table


def check_call(call: dict, answers: list, table: dict) -> None:
    """A stored judge call's ratings are the parsed ratings of its own prompt's completion."""
    kind = "pointwise" if call["name"] == "rating" else "pairwise"
    assert len(call["candidates"]) == (1 if kind == "pointwise" else 2), call
    quoted = tuple(answers[c] for c in call["candidates"])
    assert call["ratings"] == table[kind, quoted], (call, quoted)
    assert all(1 <= r <= 10 for r in call["ratings"])


def mu(judged: list, n: int, tau: float) -> np.ndarray:
    """V1-Infer's score (arXiv 2603.04304 Alg. 2) from stored judge calls, written out here:
    v = 1 / 0.5 / 0 for A's win / tie / loss, weight max(|r_A - r_B| / 9, tau)."""
    wins, weights = np.zeros(n), np.zeros(n)
    for c in judged:
        (i, j), (ri, rj) = c["candidates"], c["ratings"]
        v, w = (1.0 if ri > rj else 0.5 if ri == rj else 0.0), max(abs(ri - rj) / 9, tau)
        wins[i] += w * v
        wins[j] += w * (1 - v)
        weights[i] += w
        weights[j] += w
    return np.where(weights > 0, wins / np.maximum(weights, 1e-9), 0.5)


# ----------------------------------------------------------------------------- the call log


def test_call_log_fills_ratings_only_for_judge_calls_and_keeps_budgets():
    draft = group([[5, 5]], [[3, 4]], [[True, False]], "draft")
    judge = group([[9, 9, 0]], [[2, 2, 0]], [[True, False, False]], "judge",
                  jnp.asarray([[[0, 1], [1, 0], [0, 1]]]), jnp.asarray([[[7.0, 3.0], [2.0, 8.0], [5.0, 5.0]]]))
    log = CallLog.from_groups([draft, judge])
    assert log.candidates.tolist() == [[[-1, -1], [-1, -1], [0, 1], [1, 0], [-1, -1]]]  # the slot that did not run: -1
    ratings = np.asarray(log.ratings[0])
    assert np.isnan(ratings[[0, 1, 4]]).all() and ratings[2:4].tolist() == [[7.0, 3.0], [2.0, 8.0]]
    assert (int(log.b_seq[0]), int(log.b_total[0]), int(log.b_seq_no_judge[0])) == (3 + 2, 3 + 4 + 2 + 2, 3)
    leaves = jax.tree.leaves(log)
    assert len(leaves) == 5 and jax.jit(lambda x: x)(log).names == log.names  # a pytree of five arrays
    with pytest.raises(ValueError, match="candidates and ratings"):
        group([[1]], [[1]], [[True]], "judge", jnp.zeros((1, 1, 2), jnp.int32))
    with pytest.raises(ValueError, match=r"must both be \(1, 1, 2\)"):
        group([[1]], [[1]], [[True]], "judge", jnp.zeros((1, 2, 2), jnp.int32), jnp.zeros((1, 2, 2)))


# ----------------------------------------------------------------------------- eval rows


@pytest.mark.slow
def test_eval_rows_carry_the_ratings_parsed_from_each_judge_completion(tmp_path, monkeypatch):
    """A tiny eval (in-graph model calls) with PDR's self-rating top-k selector, V1 best-of-N
    (pairwise_v1) and adaptive PDR's V1 signal: every judge call in results.jsonl holds the
    ratings its own completion text parses to; PDR's and best-of-N's choices follow them;
    `load_calls` returns them."""
    ops = [dict(type="pdr", schedule=[4, 1], distill="shared_topk", k=2, selector="self_pointwise",
                max_new_tokens=8, candidate_max_tokens=8, truncation_head=4, judge=JUDGE),
           dict(type="best_of_n", n=4, selector="pairwise_v1", max_new_tokens=8, candidate_max_tokens=8,
                truncation_head=4, judge=dict(JUDGE, budget_multiple=2)),
           dict(type="adaptive_pdr", waves=2, min_fanout=2, max_fanout=2, tau=1.0, k=2, signal="v1_mu",
                max_new_tokens=8, candidate_max_tokens=8, truncation_head=4, judge=JUDGE)]
    config, model, rows = tiny_eval(ops)
    monkeypatch.setattr(eval_setup, "ModelLM", RuleLM)  # the in-graph LM eval opens
    LOG.clear()
    workdir = str(tmp_path / "ev")
    evaluate_module.evaluate(config, workdir, model=model, rows=rows, progress=False)
    out = fileio.read_jsonl(f"{workdir}/results.jsonl")
    texts = {r["id"]: get_task(config.task).problem_text(r) for r in rows}
    assert len(out) == 3 * 2 * 2  # operators x problems x k
    answers = [0, 1, 2, 3]  # draft j (adaptive PDR: draft slot j) answers @j@
    seen = {"rating": 0, "judge": 0}
    adaptive_judged = 0
    for r in out:
        table = parsed_log(texts[r["problem_id"]])
        judged = [c for c in r["calls"] if c["name"] in seen]
        for c in r["calls"]:
            assert ("ratings" in c) == (c["name"] in seen), c  # drafts and refines carry none
        for c in judged:
            check_call(c, answers, table)
            seen[c["name"]] += 1
        assert int(r["judge_unparsed"]) == 0
        if r["operator"].startswith("pdr"):
            assert [c["candidates"] for c in judged] == [[0], [1], [2], [3]]
            best = max(range(4), key=lambda j: (judged[j]["ratings"][0], -j))  # ties to the lower index
            assert r["completion"] == f"@{best}@"  # the refine copies the workspace's top-rated draft
        elif r["operator"].startswith("adaptive_pdr"):
            adaptive_judged += len(judged)
        else:
            assert len(judged) == 2 * 4  # B = m N judge calls
            assert r["completion"] == f"@{int(np.argmax(mu(judged, 4, Judge().tau)))}@"  # argmax mu, stored ratings
    assert seen == {"rating": 2 * 2 * 4, "judge": 2 * 2 * 8 + adaptive_judged} and adaptive_judged >= 2 * 2 * 2
    calls = results.load_calls(workdir)
    rated = calls[calls.name.isin(["rating", "judge"])]
    assert rated.candidate_a.notna().all() and rated.rating_a.between(1, 10).all()
    assert rated[rated.name == "rating"].candidate_b.isna().all() and rated[rated.name == "judge"].rating_b.notna().all()
    others = calls[~calls.name.isin(["rating", "judge"])]
    assert others.candidate_a.isna().all() and others.rating_a.isna().all() and others.rating_b.isna().all()
    first = next(r for r in out if r["operator"].startswith("best_of_n"))
    mine = calls[(calls.problem_id == first["problem_id"]) & (calls.operator == first["operator"])
                 & (calls["sample"] == first["sample"])]
    stored = [c for c in first["calls"] if c["name"] == "judge"]
    frame = mine[mine.name == "judge"]
    assert frame[["candidate_a", "candidate_b"]].astype(int).values.tolist() == [c["candidates"] for c in stored]
    assert frame[["rating_a", "rating_b"]].values.tolist() == [c["ratings"] for c in stored]


# ----------------------------------------------------------------------------- a remote LM


class RuleEndpoint:
    """Stands in for `backends.client.Client`: answers /completions bodies by `completion`,
    a draft's answer being its request seed mod 10; bills prompt and answer."""

    def post_many(self, path, bodies, check, tags=None):
        out = []
        for body, tag in zip(bodies, tags):
            name, seed = tag.rsplit(":", 1)
            ids = TOK.encode(completion(name, TOK.decode(body["prompt"]), int(seed) % 10))
            out.append(Answer(True, {"choices": [{"text": "", "token_ids": ids, "finish_reason": "length"}],
                                     "usage": {"prompt_tokens": len(body["prompt"]), "completion_tokens": len(ids)}}))
        return out

    def scrub(self, text):
        return text

    def check(self):
        pass


@pytest.mark.slow
@pytest.mark.parametrize("spec", [
    PDR((4, 1), "shared_topk", 2, "self_pointwise", max_new_tokens=8, candidate_max_tokens=8, truncation_head=4,
        judge=Judge(**JUDGE)),
    BestOfN(4, "pairwise_v1", 8, 8, 4, Judge(budget_multiple=2, **JUDGE))], ids=["pdr_self_pointwise", "pairwise_v1"])
def test_remote_lm_call_log_holds_the_parsed_ratings(spec):
    backend = BackendConfig.from_config(dict(kind="openai", base_url="http://127.0.0.1:9/v1", model="m",
                                             api="completions", api_key_env=""))
    host = RemoteHost(backend, TOK, RuleEndpoint())
    problems = ["What is 2+2?", "What is 3+3?"]
    probs = encode_problems(TOK, problems, ["4", "6"], max_problem_tokens=32)[0]
    LOG.clear()
    host.begin(2)
    res = run_operator(RemoteLM(host), probs, jax.random.key(1), spec, make_context(TOK, Sampling(), k_max=4))
    name = "rating" if spec.selector == "self_pointwise" else "judge"
    for b, problem in enumerate(problems):
        drafts = np.asarray(res.round_tokens[0][b])
        answers = [int(MARK.findall(TOK.decode(t.tolist()))[0]) for t in drafts]  # each draft's own text
        table = parsed_log(problem)
        rows = evaluate_module._calls_rows(res.calls, b)
        judged = [c for c in rows if c["name"] == name]
        assert len(judged) == (4 if name == "rating" else 8) and table
        for c in judged:
            check_call(c, answers, table)
