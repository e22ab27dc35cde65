"""Round mechanics of the PDR operators (PDR paper §3.2; oracle workspaces §4.1 and
App. D.1) with a scripted model: random-k runs no selector, the accepted path goes through
admitted candidates, oracle selection into a global summary, SR traces, honest labels, and
oracles in operator RL."""

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prd_jax import prompts as P
from prd_jax.operators.runner import encode_problems, make_context, run_operator
from prd_jax.operators.specs import Sampling
from prd_jax.operators.pdr import PDR
from prd_jax.operators.sr import SR
from prd_jax.sampling import SampleOutput
from fakes import CharTokenizer, FirstTokenGrader


@flax.struct.dataclass
class RowLM:
    """Every call emits exactly max_new tokens; output row j (prompt row x sample) repeats 100 + j."""

    def generate(self, prompts, lengths, keys, scfg, fanout=True, name="", live=None):
        rows = prompts.shape[0] * scfg.num_samples
        tokens = jnp.broadcast_to((100 + jnp.arange(rows))[:, None], (rows, scfg.max_new_tokens)).astype(jnp.int32)
        return SampleOutput(tokens, jnp.zeros((rows, scfg.max_new_tokens)),
                            jnp.full((rows,), scfg.max_new_tokens, jnp.int32), jnp.zeros((rows,), bool))

    def next_logits(self, prompts, lengths, name="", live=None):
        return jnp.zeros((prompts.shape[0], 256))


TOK = CharTokenizer()
N, CMAX, HEAD, KAPPA = 9, 6, 2, 5
PROBLEM = "2+2=?"
LP, CAND = len(PROBLEM), min(N, CMAX)
GOLD_101 = "b"  # encodes to 101: only output row 1 of a call is correct


def literal_len(template):
    text = template.user.replace("{kappa}", str(KAPPA)).replace("{{}}", "{}")
    for slot in P.SLOTS:
        text = text.replace("{" + slot + "}", "")
    return len("U:" + text + "\nA:")


def header_len(j):
    return len(P.CANDIDATE_HEADER.format(index=j))


def run(spec, gold=GOLD_101, trace=False):
    ctx = make_context(TOK, Sampling(), grader=FirstTokenGrader(), kappa=KAPPA, k_max=4, trace=trace)
    probs = encode_problems(TOK, [PROBLEM], [gold], max_problem_tokens=64)[0]
    return run_operator(RowLM(), probs, jax.random.key(0), spec, ctx)


def accepted(res, name, count, start=0):
    """Accepted mask of the `count` calls of `name` beginning at its `start`-th occurrence."""
    where = [i for i, n in enumerate(res.calls.names) if n == name][start:start + count]
    return np.asarray(res.calls.accepted[0])[where].tolist()


def workspace(res):
    row = np.asarray(res.workspace_tokens[0]).tolist()
    return row[len(row) - int(res.workspace_lengths[0]):]


def quoted(token):
    return [token] * CAND


@pytest.mark.slow
def test_random_k_runs_no_selector_and_pays_nothing_for_one():
    res = run(PDR((4, 2, 1), "random_k", 2, "random", KAPPA, N, CMAX, HEAD))
    assert res.calls.names == ("draft",) * 4 + ("refine",) * 2 + ("refine",)  # no rating / judge call
    assert int(res.b_total[0]) == 7 * N and int(res.judge_unparsed[0]) == 0
    judged = run(PDR((4, 2, 1), "shared_topk", 2, "self_pointwise", KAPPA, N, CMAX, HEAD))
    assert judged.calls.names.count("rating") == 4 + 2  # a ranker's calls would show up in the log
    for selector in ("self_pointwise", "pairwise_v1", "oracle_correct"):
        with pytest.raises(ValueError, match=f"PDR.selector='{selector}' with distill='random_k'"):
            PDR((4, 1), "random_k", 2, selector)


def test_per_sample_parent_is_an_admitted_candidate():
    # drafts emit 100..103; gold 101 admits draft 1 only. Round 2 (per-sample, M=2): call 0
    # lists its own draft 0 (not admitted) then draft 1; call 1 lists its own draft 1. The
    # refine rows emit 100, 101, so round 3's single call again admits only its "other"
    # candidate (round-2 call 1). The path: final -> round-2 call 1 -> draft 1.
    res = run(PDR((4, 2, 1), "per_sample_topk", 2, "oracle_correct", KAPPA, N, CMAX, HEAD))
    assert accepted(res, "draft", 4) == [False, True, False, False]
    assert accepted(res, "refine", 2) == [False, True]
    assert accepted(res, "refine", 1, start=2) == [True]
    assert int(res.b_seq[0]) == 3 * N
    # the one admitted candidate is numbered 1 although it is listed second
    assert workspace(res) == TOK.encode(P.CANDIDATE_HEADER.format(index=1)) + quoted(101) + TOK.encode(
        P.CANDIDATE_FOOTER)


def test_no_admitted_candidate_puts_the_latency_bound_call_on_the_path():
    res = run(PDR((4, 1), "shared_topk", 2, "oracle_correct", KAPPA, N, CMAX, HEAD), gold="z")
    assert workspace(res) == []
    # the refine quotes nothing but waited for all 4 drafts: the longest (all N; ties to the
    # first) is its parent, so B_seq still counts both sequential rounds
    assert accepted(res, "draft", 4) == [True, False, False, False] and accepted(res, "refine", 1) == [True]
    assert int(res.b_seq[0]) == 2 * N and int(res.b_total[0]) == 5 * N
    refine_in = literal_len(P.PDR_TOPK) + LP  # refined from the problem alone
    assert int(res.b_seq_io[0]) == (literal_len(P.SOLVE) + LP + N) + (refine_in + N)


@pytest.mark.parametrize("lengths,parent", [((3, 7, 7, 2), 1), ((9, 1, 1, 1), 0)])
def test_latency_bound_parent_is_the_longest_call(lengths, parent):
    from prd_jax.operators.calls import path_calls

    out = jnp.asarray([lengths])
    log = path_calls([(jnp.ones_like(out), out, "draft"), (jnp.ones((1, 1), jnp.int32), jnp.asarray([[5]]), "refine")],
                     [None, jnp.asarray([[-1]])], [], jnp.zeros((1,), jnp.int32))
    assert np.asarray(log.accepted[0]).tolist() == [j == parent for j in range(4)] + [True]
    assert int(log.b_seq[0]) == lengths[parent] + 5


@pytest.mark.parametrize("selector,admitted", [("random", [0, 1, 2, 3]), ("oracle_correct", [1]),
                                               ("oracle_incorrect", [0, 2, 3])])
@pytest.mark.slow
def test_oracle_selection_into_a_global_summary(selector, admitted):
    res = run(PDR((4, 2, 1), "global_summary", 2, selector, KAPPA, N, CMAX, HEAD))
    summary_in = literal_len(P.DISTILL_SUMMARY) + LP + sum(header_len(j + 1) + CAND + len(P.CANDIDATE_FOOTER)
                                                             for j in range(len(admitted)))
    in_tokens = np.asarray(res.calls.in_tokens[0])
    assert res.calls.names[4] == "summary" and int(in_tokens[4]) == summary_in
    # refine call m's parent is the (m mod A)-th admitted draft; the path runs through call 0
    assert accepted(res, "draft", 4) == [i == admitted[0] for i in range(4)]
    # round 3 summarises the two round-2 outputs (100, 101): the oracle admits as in round 2
    second = {"random": 2, "oracle_correct": 1, "oracle_incorrect": 1}[selector]
    assert int(in_tokens[4 + 1 + 2]) == literal_len(P.DISTILL_SUMMARY) + LP + sum(
        header_len(j + 1) + CAND + len(P.CANDIDATE_FOOTER) for j in range(second))
    if selector == "oracle_correct":  # round-2 call 1 wrote the admitted 101: it is the parent
        assert accepted(res, "refine", 2) == [False, True]


def test_summary_vote_counts_selects_its_template_and_label():
    spec = PDR((4, 1), "global_summary", 2, "random", KAPPA, N, CMAX, HEAD, summary_vote_counts=True)
    res = run(spec)
    cands = sum(header_len(j + 1) + CAND + len(P.CANDIDATE_FOOTER) for j in range(4))
    assert int(res.calls.in_tokens[0, 4]) == literal_len(P.DISTILL_SUMMARY_VOTES) + LP + cands
    assert "how many attempts" not in P.DISTILL_SUMMARY.user
    assert "how many attempts" in P.DISTILL_SUMMARY_VOTES.user
    assert spec.label == (f"pdr(4-1,global_summary,kappa={KAPPA},vote_counts,candidate_max_tokens={CMAX},"
                          f"truncation_head={HEAD},budget={N})")
    with pytest.raises(ValueError, match="summary_vote_counts=True needs distill='global_summary'"):
        PDR((4, 1), "shared_topk", summary_vote_counts=True)
    with pytest.raises(ValueError, match="summary_vote_counts=1; allowed: True, False"):
        PDR((4, 1), "global_summary", summary_vote_counts=1)


def test_global_summary_refuses_a_model_ranker():
    with pytest.raises(ValueError, match=r"PDR.selector='self_pointwise' with distill='global_summary'.*"
                                         r"'oracle_correct', 'oracle_incorrect'"):
        PDR((4, 1), "global_summary", 2, "self_pointwise")


def test_labels_say_random_k_for_a_random_ranking():
    assert PDR((8, 4, 1), "shared_topk", 2, "random").label == "pdr(8-4-1,shared_topk,k=2,random-k,budget=512)"
    assert PDR((8, 4, 1), "per_sample_topk", 2, "random").label == (
        "pdr(8-4-1,per_sample_topk,k=2,random-k,budget=512)")
    assert PDR((8, 4, 1), "random_k", 2).label == "pdr(8-4-1,random_k,k=2,budget=512)"
    ranked = PDR((8, 4, 1), "shared_topk", 2, "self_pointwise").label
    assert ranked == "pdr(8-4-1,shared_topk,k=2,sel=self_pointwise[m=1,think=0],budget=512)"
    judged = PDR((8, 4, 1), "shared_topk", 2, "self_pointwise", judge=dict(domain="math", tau=0.2)).label
    assert judged == "pdr(8-4-1,shared_topk,k=2,sel=self_pointwise[math,m=1,think=0,tau=0.2],budget=512)"
    # fields outside the readable core appear whenever they differ from their default
    assert PDR((8, 4, 1), "shared_topk", 1, "random", refine_template="previous").label == (
        "pdr(8-4-1,shared_topk,k=1,random-k,refine_template=previous,budget=512)")
    assert PDR((8, 1), "global_summary", 2, "oracle_incorrect").label == (
        "pdr(8-1,global_summary,kappa=256,sel=oracle_incorrect,budget=512)")
    assert "sel=random" not in PDR().label


def test_sr_returns_one_trace_per_call():
    res = run(SR(2, False, N, CMAX, HEAD), trace=True)
    solve_in = literal_len(P.SOLVE) + LP
    refine_in = literal_len(P.SR_REFINE) + LP + CAND
    assert len(res.round_traces) == 3
    for t, want in zip(res.round_traces, (solve_in, refine_in, refine_in)):
        assert t.prompts.shape[:2] == (1, 1) and t.logprobs.shape == (1, 1, N)
        assert int(t.prompt_lengths[0, 0]) == want
    np.testing.assert_array_equal(np.concatenate([t.prompt_lengths for t in res.round_traces], axis=1),
                                  res.calls.in_tokens)
    # the last refine prompt quotes the previous answer (every call emits 100 = "a"), capped at CAND
    last = np.asarray(res.round_traces[-1].prompts[0, 0]).tolist()[-refine_in:]
    assert last == TOK.encode("U:" + P.render(P.SR_REFINE, problem=PROBLEM, previous="a" * CAND) + "\nA:")
    assert run(SR(2, False, N, CMAX, HEAD)).round_traces == ()


# ----------------------------------------------------------------------------- operator RL


@pytest.mark.slow
def test_oracle_selector_runs_in_operator_rl_rollouts(monkeypatch):
    """OperatorRollouts passes a grader (rewards.math.grade, as the reward): an oracle
    workspace holds exactly the first k drafts that grade marks correct."""
    from prd_jax.data.synthetic import CharVocab
    from prd_jax.model import get_model_config, init_params
    from prd_jax.rewards import math as math_rewards
    from prd_jax.train.operator_rl import OperatorRollouts
    from prd_jax.train.rl import RLConfig

    from prd_jax.tasks import math as math_task

    monkeypatch.setattr(math_rewards, "grade", lambda text, gold, **kw: len(text) % 3 != 0)
    monkeypatch.setattr(math_task, "grade_detailed",  # the task's grader (tasks.math) grades through it
                        lambda text, gold, **kw: {"correct": len(text) % 3 != 0, "parsed": True, "answer": None})
    vocab = CharVocab()
    rl = RLConfig(prompts_per_step=1, samples_per_prompt=2, max_prompt_tokens=32, max_new_tokens=8,
                  operator_fraction=1.0, templates="compact", max_problem_tokens=16,
                  operator=dict(schedule=(4, 1), distill="shared_topk", k=2, selector="oracle_correct",
                                max_new_tokens=8, candidate_max_tokens=6, truncation_head=2, kappa=8))
    cfg = get_model_config("tiny", max_position=512)
    params = init_params(cfg, jax.random.key(0))
    rollouts = OperatorRollouts(rl, cfg, vocab, None, rl.operator, 1)
    chosen = [("1+2=?", "3")]
    key = jax.random.key(7)
    groups, metrics = rollouts(params, key, chosen, lambda text, answer: float(len(text) % 2),
                               lambda r: r - r.mean(axis=1, keepdims=True))
    out = rollouts._run(params, rollouts._problems(chosen), jax.random.split(key, 2))  # the same rollout
    tpl = rollouts.ctx.templates["pdr_topk"]
    drafts_t, drafts_l = np.asarray(out.round_tokens[0]), np.asarray(out.round_lengths[0])
    sizes = []
    for row in range(2):
        correct = [i for i in range(4) if len(vocab.decode(drafts_t[row, i, :drafts_l[row, i]].tolist())) % 3 != 0]
        expected = []
        for number, i in enumerate(correct[:2]):
            ids = drafts_t[row, i, :drafts_l[row, i]].tolist()
            ids = ids[:-1] if ids and ids[-1] in vocab.stop_ids else ids
            ids = ids if len(ids) <= 6 else ids[:2] + ids[len(ids) - 4:]
            expected += list(tpl.headers[number]) + ids + list(tpl.footer)
        ws = np.asarray(out.workspace_tokens[row]).tolist()
        assert ws[len(ws) - int(out.workspace_lengths[row]):] == expected
        sizes.append(len(correct))
    assert any(0 < s < 4 for s in sizes), sizes  # the oracle admitted some drafts and refused others
    assert metrics["workspace_length"] == pytest.approx(float(np.asarray(out.workspace_lengths).mean()))


def first_token_grouper(keys):
    """A majority grouper whose answer key is `keys[first token]` (None: no answer)."""
    def group(cand_tok, cand_len):
        cand_tok = np.asarray(cand_tok)
        out = np.full(cand_tok.shape[:2], -1, np.int32)
        for b in range(cand_tok.shape[0]):
            first = {}
            for i in range(cand_tok.shape[1]):
                key = keys.get(int(cand_tok[b, i, 0]))
                if key is not None:
                    out[b, i] = first.setdefault(key, i)
        return out
    return group


@pytest.mark.slow
def test_majority_top_k_quotes_the_most_shared_answers_and_no_answer_last():
    # drafts 0..3 emit 100..103; answers a, none, b, a: votes 2, 0, 1, 2 -> top-2 = drafts 0, 3
    ctx = make_context(TOK, Sampling(), grouper=first_token_grouper({100: "a", 102: "b", 103: "a"}), kappa=KAPPA,
                       k_max=4)
    probs = encode_problems(TOK, [PROBLEM], [GOLD_101], max_problem_tokens=64)[0]
    spec = PDR((4, 1), "shared_topk", 2, "majority", KAPPA, N, CMAX, HEAD)
    res = run_operator(RowLM(), probs, jax.random.key(0), spec, ctx)
    footer = TOK.encode(P.CANDIDATE_FOOTER)
    assert workspace(res) == (TOK.encode(P.CANDIDATE_HEADER.format(index=1)) + quoted(100) + footer
                              + TOK.encode(P.CANDIDATE_HEADER.format(index=2)) + quoted(103) + footer)
    assert np.asarray(res.calls.accepted[0, :4]).tolist() == [True, False, False, False]
    assert int(res.b_seq[0]) == 2 * N and int(res.b_total[0]) == 5 * N  # no judge calls: nothing else paid
    # k=3 reaches the one-vote answer before the draft without an answer
    res = run_operator(RowLM(), probs, jax.random.key(0), PDR((4, 1), "shared_topk", 3, "majority", KAPPA, N, CMAX,
                                                              HEAD), ctx)
    assert workspace(res)[-(CAND + len(footer)):-len(footer)] == quoted(102)
    assert spec.label == "pdr(4-1,shared_topk,k=2,sel=majority,kappa=5,candidate_max_tokens=6,truncation_head=2,budget=9)"
    with pytest.raises(ValueError, match=r"PDR.selector='majority' with distill='global_summary'"):
        PDR((4, 1), "global_summary", 2, "majority")


def test_majority_ranking_in_graph_equals_the_sft_traces_ranking():
    """The eval's `majority` top-k (task grouper + in-graph votes) ranks real preimage drafts
    exactly as `preimage.majority_order` ranks the SFT workspaces."""
    import types
    from prd_jax.data import preimage
    from prd_jax.data.synthetic import CharVocab
    from prd_jax.operators import verify
    from prd_jax.tasks.grading import TaskGrouper
    vocab, rng = CharVocab(), np.random.default_rng(5)
    ctx = types.SimpleNamespace(answer_ids=TaskGrouper("preimage", vocab))
    for p in preimage.generate(6, 21, (3, 4)):
        texts = [preimage.draft(rng, p, 80, 0.3) for _ in range(8)] + ["x=1: 1+1", "ok\n\\boxed{ 07}"]
        ids = [vocab.encode(t) for t in texts]
        width = max(map(len, ids))
        cand_t = jnp.asarray([[i + [0] * (width - len(i)) for i in ids]], jnp.int32)
        cand_l = jnp.asarray([[len(i) for i in ids]], jnp.int32)
        scores = verify.majority(cand_t, cand_l, ctx).scores
        assert np.asarray(verify.top(verify.Selection(scores, None, [], None)))[0].tolist() == (
            preimage.majority_order(texts))
