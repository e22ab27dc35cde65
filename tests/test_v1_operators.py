"""V1 judges, in-graph tournaments, best-of-N selectors and RSA with a scripted judge model.

The fake model writes candidate m as [200 + m] + its answer text; as a judge it reads the
candidate markers in the prompt and rates candidate m as 1 + m, either in rating tags
(generate) or through the forced next-token distribution (next_logits), so the
tournament can be replayed on the host and budgets computed by hand.
"""

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prd_jax.evaluate import build_spec
from prd_jax import prompts as P
from prd_jax.operators import tournament
from prd_jax.operators.judges import RatingParser, RatingTokens, rating_distribution
from prd_jax.operators.runner import encode_problems, make_context, run_operator
from prd_jax.operators.specs import Judge, Sampling
from prd_jax.operators.pdr import PDR
from prd_jax.operators.rsa import RSA
from prd_jax.operators.best_of_n import BestOfN
from prd_jax.sampling import SampleOutput
from test_operators import TOK, CharTokenizer, header_len, literal_len

MARK, VOCAB = 200, 256
PROBLEM = "2+2=?"
LP = len(PROBLEM)
LT, GT, ONE = TOK.encode("<")[0], TOK.encode(">")[0], TOK.encode("1")[0]
A_ID, B_ID = TOK.encode("A")[0], TOK.encode("B")[0]


def _text_table(texts):
    width = max(len(t) for t in texts)
    table = np.zeros((len(texts), width), np.int32)
    for i, t in enumerate(texts):
        table[i, :len(t)] = t
    return jnp.asarray(table), jnp.asarray([len(t) for t in texts], jnp.int32)


def _markers(prompts):
    """First and last candidate marker in each row -> candidate indices (A, B)."""
    is_mark = prompts >= MARK
    first = jnp.take_along_axis(prompts, jnp.argmax(is_mark, axis=1)[:, None], axis=1)[:, 0] - MARK
    last_pos = prompts.shape[1] - 1 - jnp.argmax(is_mark[:, ::-1], axis=1)
    last = jnp.take_along_axis(prompts, last_pos[:, None], axis=1)[:, 0] - MARK
    return first, last


@flax.struct.dataclass
class JudgeLM:
    """answers[m % len]: sample m's text after its marker; mode "tags" | "garbage"."""

    answers: tuple = flax.struct.field(pytree_node=False, default=("\\boxed{4}",))
    mode: str = flax.struct.field(pytree_node=False, default="tags")

    def generate(self, prompts, lengths, keys, scfg, fanout=True, name="", live=None):
        m_count = scfg.num_samples
        rows = prompts.shape[0] * m_count
        prompts = jnp.repeat(prompts, m_count, axis=0)
        m = jnp.arange(rows) % m_count
        texts = [[MARK + i] + TOK.encode(a) for i, a in zip(range(MARK), self.answers)]
        solve_t, solve_l = _text_table([[0] + TOK.encode(a) for a in self.answers])
        sol = solve_t[m % len(self.answers)].at[:, 0].set(MARK + m)
        sol_l = solve_l[m % len(self.answers)]
        del texts
        a, b = _markers(prompts)
        if self.mode == "tags":
            digits = jnp.asarray([TOK.encode(str(d))[0] for d in range(10)])
            head = TOK.encode("<rating_A>")
            mid = TOK.encode("</rating_A> <rating_B>")
            tail = TOK.encode("</rating_B>")
            verdict = jnp.concatenate([jnp.broadcast_to(jnp.asarray(head), (rows, len(head))),
                                       digits[a + 1][:, None], jnp.broadcast_to(jnp.asarray(mid), (rows, len(mid))),
                                       digits[b + 1][:, None], jnp.broadcast_to(jnp.asarray(tail), (rows, len(tail)))], 1)
            point = TOK.encode("<rating>")
            single = jnp.concatenate([jnp.broadcast_to(jnp.asarray(point), (rows, len(point))),
                                      digits[a + 1][:, None],
                                      jnp.broadcast_to(jnp.asarray(TOK.encode("</rating>")), (rows, 9))], 1)
        else:
            verdict = jnp.broadcast_to(jnp.asarray(TOK.encode("no verdict")), (rows, 10))
            single = verdict
        pairwise_prompt = jnp.any(prompts == B_ID, axis=1) & jnp.any(prompts == LT, axis=1)
        judge_prompt = jnp.any(prompts == LT, axis=1)
        width = max(scfg.max_new_tokens, sol.shape[1], verdict.shape[1], single.shape[1])
        pad = lambda x: jnp.pad(x, ((0, 0), (0, width - x.shape[1])))
        out = jnp.where(judge_prompt[:, None], jnp.where(pairwise_prompt[:, None], pad(verdict), pad(single)),
                        pad(sol))
        length = jnp.where(judge_prompt, jnp.where(pairwise_prompt, verdict.shape[1], single.shape[1]), sol_l)
        length = jnp.minimum(length, scfg.max_new_tokens)
        return SampleOutput(out[:, :scfg.max_new_tokens], jnp.zeros(out[:, :scfg.max_new_tokens].shape),
                            length, jnp.zeros((rows,), bool))

    def next_logits(self, prompts, lengths, name="", live=None):
        """After '<rating_A>' / '<rating_B>' / '<rating>': peak on the candidate's digit; after
        the extra '1' of the two-step "10" read: no '0'."""
        a, b = _markers(prompts)
        rating = jnp.where(prompts[:, -2] == B_ID, b + 1, a + 1)
        digit = jnp.asarray([TOK.encode(str(d))[0] for d in range(10)])[rating]
        logits = jnp.where(jnp.arange(VOCAB)[None, :] == digit[:, None], 10.0, 0.0)
        after_one = prompts[:, -1] == ONE
        return jnp.where(after_one[:, None], -jnp.where(jnp.arange(VOCAB) == TOK.encode("0")[0], 30.0, 0.0)[None],
                         logits)


def ctx():
    return make_context(TOK, Sampling(), k_max=8)


def problems():
    return encode_problems(TOK, [PROBLEM], ["4"], max_problem_tokens=64)[0]


def run(spec, lm=None, key=0):
    return run_operator(lm or JudgeLM(), problems(), jax.random.key(key), spec, ctx())


def selected(res):
    return int(res.final_tokens[0, 0]) - MARK


def judge_calls(res):
    names = np.asarray(res.calls.names)
    ins = np.asarray(res.calls.in_tokens[0])
    return (names == "judge") & (ins > 0)


ANSWER = "\\boxed{4}"
CAND = 1 + len(ANSWER)  # marker + answer
SOLVE_IN = literal_len(P.SOLVE) + LP
PAIR_IN = literal_len(P.PAIRWISE_MATH) + LP + 2 * CAND
PAIR_OUT = len("<rating_A>1</rating_A> <rating_B>1</rating_B>")
POINT_IN = literal_len(P.POINTWISE_MATH) + LP + CAND
POINT_OUT = len("<rating>1</rating>")
THINK = Judge(max_new_tokens=64)


def host_seed(key, tag):
    problem_key = jax.random.split(jax.random.key(key), 1)[0]
    return int(jax.random.randint(jax.random.fold_in(problem_key, tag), (), 0, 2 ** 31 - 1))


def quality_judge(pairs):
    return [(1 + i, 1 + j) for i, j in pairs]


# ----------------------------------------------------------------------------- judges

def test_rating_distribution_two_token_ten_hand_computed():
    rt = RatingTokens.from_tokenizer(TOK)
    assert rt.ten_id is None  # "10" is "1" "0" for the character tokenizer

    @flax.struct.dataclass
    class Fixed:
        def next_logits(self, prompts, lengths, name="", live=None):
            base = jnp.full((VOCAB,), -1e9).at[rt.digit_ids[0]].set(np.log(0.6)).at[rt.digit_ids[1]].set(np.log(0.4))
            zero = jnp.zeros((VOCAB,)).at[rt.zero_id].set(np.log(0.25 * (VOCAB - 1) / 0.75))  # P("0") = 0.25
            return jnp.where((prompts[:, -1] == rt.digit_ids[0])[:, None], zero[None], base[None])

    seg = (jnp.asarray([[5, 6]]), jnp.asarray([2]))
    p = np.asarray(rating_distribution(Fixed(), [seg], rt, 0))[0]
    np.testing.assert_allclose(p, [0.45, 0.4, 0, 0, 0, 0, 0, 0, 0, 0.15], atol=1e-5)
    assert abs(p @ np.arange(1, 11) - 2.75) < 1e-4


def test_rating_distribution_single_token_ten():
    class TenTokenizer(CharTokenizer):
        def encode(self, text, add_bos=False):
            return [250] if text == "10" else super().encode(text)

    rt = RatingTokens.from_tokenizer(TenTokenizer())
    assert rt.ten_id == 250 and rt.values[9] == (250,)

    @flax.struct.dataclass
    class Fixed:
        def next_logits(self, prompts, lengths, name="", live=None):
            return jnp.zeros((prompts.shape[0], VOCAB)).at[:, 250].set(np.log(3.0))

    p = np.asarray(rating_distribution(Fixed(), [(jnp.asarray([[5]]), jnp.asarray([1]))], rt, 0))[0]
    np.testing.assert_allclose(p, [1 / 12] * 9 + [3 / 12], atol=1e-6)


def test_rating_parser_takes_last_valid_tag():
    parse = RatingParser(TOK)
    texts = ["<rating_A>3</rating_A> <rating_B>10</rating_B>", "first <rating_A>2</rating_A> then <rating_A> 8 "
             "</rating_A>", "<rating_A>11</rating_A><rating_B>0</rating_B>", "nothing"]
    toks = [TOK.encode(t) for t in texts]
    width = max(map(len, toks))
    arr = np.array([t + [0] * (width - len(t)) for t in toks])
    out = parse(arr, np.array([len(t) for t in toks]), tags=("rating_A", "rating_B"))
    assert out.tolist() == [[3, 10], [8, 0], [0, 0], [0, 0]]


# ----------------------------------------------------------------------------- best-of-N

N = 6


def test_best_of_n_pointwise_budget_and_choice():
    res = run(BestOfN(N, "self_pointwise", 16, 32, 8, THINK))
    assert selected(res) == N - 1  # rated 1 + m
    draft = SOLVE_IN + CAND
    assert int(res.b_total_io[0]) == N * draft + N * (POINT_IN + POINT_OUT)
    assert int(res.b_seq_io[0]) == draft + POINT_IN + POINT_OUT
    assert int(res.b_total[0]) == N * CAND + N * POINT_OUT and int(res.b_seq[0]) == CAND + POINT_OUT
    assert int(res.judge_unparsed[0]) == 0


@pytest.mark.parametrize("m,both_orders", [(1, False), (2, False), (2, True)])
@pytest.mark.slow
def test_best_of_n_pairwise_v1_replays_host_tournament(m, both_orders):
    judge = Judge(max_new_tokens=64, budget_multiple=m, both_orders=both_orders)
    res = run(BestOfN(N, "pairwise_v1", 16, 32, 8, judge), key=3)
    host = tournament.swiss_tournament(N, quality_judge, m * N, seed=host_seed(3, 2), both_orders=both_orders)
    calls = judge_calls(res)
    assert selected(res) == host.best
    assert int(calls.sum()) == host.calls <= m * N
    accepted = np.asarray(res.calls.accepted[0]) & calls
    assert int(accepted.sum()) == len(host.batches)  # one latency-bound call per batch
    draft = SOLVE_IN + CAND
    assert int(res.b_total_io[0]) == N * draft + host.calls * (PAIR_IN + PAIR_OUT)
    assert int(res.b_seq_io[0]) == draft + len(host.batches) * (PAIR_IN + PAIR_OUT)
    assert int(res.b_total[0]) == N * CAND + host.calls * PAIR_OUT
    assert int(res.b_seq[0]) == CAND + len(host.batches) * PAIR_OUT


@pytest.mark.slow
def test_forced_ratings_match_tags_and_are_counted():
    spec = BestOfN(N, "pairwise_v1", 16, 32, 8, THINK)
    tags, forced = run(spec), run(spec, JudgeLM(mode="garbage"))
    host = tournament.swiss_tournament(N, quality_judge, N, seed=host_seed(0, 2))
    assert selected(tags) == selected(forced) == host.best
    n_calls = int(judge_calls(forced).sum())
    assert int(tags.judge_unparsed[0]) == 0 and int(forced.judge_unparsed[0]) == n_calls == N
    # garbage reasoning (10 tokens) + forced "\n<rating_A>" r "</rating_A> <rating_B>" r
    forced_out = 10 + len("\n<rating_A>") + 1 + len("</rating_A> <rating_B>") + 1
    assert int(forced.b_total[0]) - int(tags.b_total[0]) == n_calls * (forced_out - PAIR_OUT)


def test_no_reasoning_judge_reads_forced_ratings():
    res = run(BestOfN(N, "self_pointwise", 16, 32, 8, Judge(max_new_tokens=0)))
    assert selected(res) == N - 1 and int(res.judge_unparsed[0]) == 0  # nothing to parse


@pytest.mark.slow
def test_round_robin_and_random_pairing_budgets():
    rr = run(BestOfN(N, "round_robin", 16, 32, 8, THINK))
    assert int(judge_calls(rr).sum()) == N * (N - 1) // 2
    assert int((np.asarray(rr.calls.accepted[0]) & judge_calls(rr)).sum()) == N - 1
    assert selected(rr) == N - 1
    rp = run(BestOfN(N, "pairwise_random", 16, 32, 8, Judge(max_new_tokens=64, budget_multiple=2)), key=5)
    host = tournament.random_pairing(N, quality_judge, 2 * N, seed=host_seed(5, 2))
    assert int(judge_calls(rp).sum()) == host.calls == 2 * N
    assert selected(rp) == host.best


@pytest.mark.parametrize("answers,expected", [(("3", "4", "4", "3", "5"), 0), (("7", "4", "4", "3", "x"), 1),
                                              (("x", "y", "z"), 0)])
def test_majority_vote_ties_to_lower_index(answers, expected):
    texts = tuple(f"\\boxed{{{a}}}" if a not in "xyz" else "none" for a in answers)
    res = run(BestOfN(len(answers), "majority", 16, 32, 8), JudgeLM(answers=texts))
    assert selected(res) == expected
    assert int(res.b_total_io[0]) == sum(SOLVE_IN + 1 + len(t) for t in texts)  # no judge calls
    assert int(res.b_total[0]) == sum(1 + len(t) for t in texts)


# ----------------------------------------------------------------------------- RSA and PDR

def rsa_in(k):
    return literal_len(P.RSA_AGGREGATE) + LP + sum(header_len(j + 1) + CAND + len(P.CANDIDATE_FOOTER)
                                                    for j in range(k))


@pytest.mark.slow
def test_rsa_budget_by_hand():
    res = run(RSA(4, 2, 2, 16, 32, 8))
    draft, agg = SOLVE_IN + CAND, rsa_in(2) + CAND
    assert (int(res.b_total_io[0]), int(res.b_seq_io[0])) == (4 * draft + 2 * 4 * agg, draft + 2 * agg)
    assert (int(res.b_total[0]), int(res.b_seq[0])) == ((4 + 2 * 4) * CAND, 3 * CAND)
    assert res.calls.names == ("draft",) * 4 + ("aggregate",) * 8


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.slow
def test_rsa_prune_keeps_only_top_ranked_parents(seed):
    res = run(RSA(4, 2, 1, 16, 32, 8, prune_every=1, keep=2, judge=THINK), key=seed)
    accepted_draft = int(np.argmax(np.asarray(res.calls.accepted[0, :4])))
    assert accepted_draft in (2, 3)  # the tournament ranks 3 > 2 > 1 > 0
    host = tournament.swiss_tournament(4, quality_judge, 4, seed=host_seed(seed, 2))
    judge = np.asarray(res.calls.names) == "judge"
    assert int((judge & (np.asarray(res.calls.in_tokens[0]) > 0)).sum()) == host.calls


@pytest.mark.slow
def test_pdr_pairwise_v1_forwards_tournament_top_k():
    spec = PDR((4, 1), "shared_topk", 2, "pairwise_v1", 8, 16, 32, 8, judge=THINK)
    res = run(spec)
    row = np.asarray(res.workspace_tokens[0])
    ws = row[len(row) - int(res.workspace_lengths[0]):]
    assert [int(t) - MARK for t in ws if t >= MARK] == [3, 2]


# ----------------------------------------------------------------------------- specs and harness

@pytest.mark.parametrize("make,field", [
    (lambda: Judge(domain="poetry"), "Judge.domain"), (lambda: Judge(budget_multiple=0), "budget_multiple"),
    (lambda: BestOfN(selector="vibes"), "BestOfN.selector"), (lambda: RSA(4, 5), "RSA.subset"),
    (lambda: RSA(prune_every=1, keep=1), "RSA.keep"), (lambda: BestOfN(judge={"m": 2}), "unknown fields")])
def test_invalid_v1_specs_name_the_field(make, field):
    with pytest.raises(ValueError, match=field):
        make()


def test_harness_builds_v1_specs_from_config_entries():
    bon = build_spec(dict(type="best_of_n", n=4, selector="round_robin", judge=dict(domain="code")))
    assert bon == BestOfN(4, "round_robin", judge=Judge(domain="code"))
    rsa = build_spec(dict(type="rsa", population=4, subset=2, loops=1, final="majority"))
    assert rsa.final == "majority" and "rsa(N=4,K=2,T=1" in rsa.label


@pytest.mark.slow
def test_tournament_budget_never_exceeded_in_graph():
    for m, n in ((1, 3), (3, 5)):
        res = run(BestOfN(n, "pairwise_v1", 16, 32, 8, Judge(max_new_tokens=64, budget_multiple=m)))
        assert int(judge_calls(res).sum()) <= m * n
