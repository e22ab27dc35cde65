"""V1-Infer Swiss tournament (arXiv 2603.04304, Alg. 2-4) and its baselines."""

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prd_jax.operators.tournament import (circle_rounds, coverage_pairs, pointwise_best,
                                          random_pairing, round_robin, simulated_judge,
                                          swiss_pairs, swiss_tournament)

FAST = settings(max_examples=60, deadline=None)


def key(i, j):
    return (min(i, j), max(i, j))


def perfect_judge(correct):
    """Correct beats incorrect 10 vs 1 (either slot); equal correctness ties 5-5."""
    def judge(pairs):
        return [(5, 5) if correct[a] == correct[b] else ((10, 1) if correct[a] else (1, 10))
                for a, b in pairs]
    return judge


def scripted_judge(table):
    """Fixed ratings per unordered pair, independent of slot order."""
    def judge(pairs):
        out = []
        for a, b in pairs:
            r = table[key(a, b)]
            out.append(r if a < b else (r[1], r[0]))
        return out
    return judge


def opponents(pairs, n):
    opp = [set() for _ in range(n)]
    for a, b in pairs:
        opp[a].add(b)
        opp[b].add(a)
    return opp


def sim_judge(n, seed, **kw):
    rng = np.random.default_rng(seed)
    correct = rng.random(n) < 0.3
    return simulated_judge(correct, rng=rng, **kw)


def assert_disjoint_batches(result, both_orders=False):
    for batch in result.batches:
        unordered = [key(a, b) for a, b in batch]
        if both_orders:  # every pair is sent once in each order
            assert len(set(batch)) == len(batch) and all((b, a) in batch for a, b in batch)
            unordered = sorted(set(unordered))
        nodes = [x for k in unordered for x in k]
        assert len(nodes) == len(set(nodes)), batch
        assert all(a != b for a, b in batch)


# ----------------------------------------------------------------------------- budget


@FAST
@given(n=st.integers(2, 24), m=st.integers(1, 3), both=st.booleans(), seed=st.integers(0, 999))
def test_budget_never_exceeded_and_batches_disjoint(n, m, both, seed):
    budget = m * n
    res = swiss_tournament(n, sim_judge(n, seed), budget, seed=seed, both_orders=both)
    assert res.calls <= budget
    assert res.calls == len(res.pairs) == sum(len(b) for b in res.batches)
    assert [p for b in res.batches for p in b] == res.pairs
    cost = 2 if both else 1
    assert budget - res.calls < cost  # the whole budget is spent (an odd call may remain)
    assert_disjoint_batches(res, both)


@FAST
@given(n=st.integers(2, 24), budget=st.integers(0, 90), both=st.booleans(),
       seed=st.integers(0, 999))
def test_any_int_budget_is_respected(n, budget, both, seed):
    res = swiss_tournament(n, sim_judge(n, seed), budget, seed=seed, both_orders=both)
    assert res.calls <= budget and budget - res.calls < (2 if both else 1)
    rp = random_pairing(n, sim_judge(n, seed), budget, seed=seed)
    assert rp.calls == budget
    assert_disjoint_batches(rp)
    assert all(len(b) <= n // 2 for b in rp.batches)


# ----------------------------------------------------------------------------- pairing rules


mu_grid = st.integers(0, 4).map(lambda x: x / 4)  # coarse grid: plenty of mu ties


@st.composite
def pairing_state(draw):
    n = draw(st.integers(2, 20))
    mu = np.array(draw(st.lists(mu_grid, min_size=n, max_size=n)))
    all_pairs = list(itertools.combinations(range(n), 2))
    seen = {p for p in all_pairs if draw(st.booleans())} if draw(st.booleans()) else \
        set(draw(st.lists(st.sampled_from(all_pairs), max_size=len(all_pairs))))
    return n, mu, seen


@settings(max_examples=300, deadline=None)
@given(state=pairing_state(), window=st.integers(1, 10))
def test_swiss_pairs_prefer_unseen_within_window(state, window):
    n, mu, seen = state
    batch = swiss_pairs(mu, seen, window=window)
    ranking = sorted(range(n), key=lambda i: (-mu[i], i))
    rank = {c: r for r, c in enumerate(ranking)}
    nodes = [x for p in batch for x in p]
    assert len(nodes) == len(set(nodes))
    used = set()
    for i, j in batch:  # replay the walk at pairing time
        assert 0 < rank[j] - rank[i] <= window
        free = [x for x in ranking[rank[i] + 1: rank[i] + 1 + window] if x not in used]
        unseen = [x for x in free if key(i, x) not in seen]
        if unseen:  # no repeat while an unseen pair is available in the window
            assert key(i, j) not in seen
            assert abs(mu[i] - mu[j]) == min(abs(mu[i] - mu[x]) for x in unseen)
        else:
            assert abs(mu[i] - mu[j]) == min(abs(mu[i] - mu[x]) for x in free)
        used.update((i, j))
    # maximality: a candidate that sits out had every window partner taken before its turn
    first_of = {i: rank[i] for i, _ in batch}
    taken_at = {}
    for i, j in batch:
        taken_at[i] = taken_at[j] = rank[i]
    for a in set(range(n)) - used:
        for x in ranking[rank[a] + 1: rank[a] + 1 + window]:
            assert taken_at.get(x, math.inf) < rank[a], (a, x, batch)
    assert list(first_of.values()) == sorted(first_of.values())


@settings(max_examples=300, deadline=None)
@given(state=pairing_state(), d_min=st.integers(1, 3), data=st.data())
def test_coverage_pairs_new_opponents_min_gap(state, d_min, data):
    n, mu, seen = state
    degree = np.array(data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)))
    priority = np.array(data.draw(st.permutations(range(n))))
    batch = coverage_pairs(mu, degree, seen, d_min=d_min, priority=priority)
    order = sorted(range(n), key=lambda i: (degree[i], priority[i]))
    pos = {c: r for r, c in enumerate(order)}
    nodes = [x for p in batch for x in p]
    assert len(nodes) == len(set(nodes))
    used, taken_at = set(), {}
    for i, j in batch:
        assert degree[i] < d_min and key(i, j) not in seen
        free = [x for x in range(n) if x != i and x not in used and key(i, x) not in seen]
        gaps = [abs(mu[i] - mu[x]) for x in free]
        assert j == free[int(np.argmin(gaps))]  # smallest gap, ties to the lowest index
        used.update((i, j))
        taken_at[i] = taken_at[j] = pos[i]
    assert [pos[i] for i, _ in batch] == sorted(pos[i] for i, _ in batch)
    for a in range(n):  # a needy candidate left out had no free unseen partner at its turn
        if degree[a] < d_min and a not in used:
            for x in range(n):
                if x != a and key(a, x) not in seen:
                    assert taken_at.get(x, math.inf) < pos[a]


@FAST
@given(n=st.integers(3, 24), m=st.integers(2, 3), seed=st.integers(0, 999))
def test_d_min_coverage_reached(n, m, seed):
    res = swiss_tournament(n, sim_judge(n, seed), m * n, seed=seed)
    assert min(len(o) for o in opponents(res.pairs, n)) >= 2


@FAST
@given(n=st.integers(2, 12).map(lambda k: 2 * k), seed=st.integers(0, 999))
def test_d_min_coverage_reached_both_orders(n, seed):
    # even N: the pairing costs N calls and coverage at most 2N more, so 3N suffices
    res = swiss_tournament(n, sim_judge(n, seed), 3 * n, seed=seed, both_orders=True)
    assert min(len(o) for o in opponents(res.pairs, n)) >= 2


def test_two_candidates_cannot_reach_d_min_and_repeat_in_swiss():
    res = swiss_tournament(2, sim_judge(2, 0), 5, seed=0)
    assert res.calls == 5 and {key(*p) for p in res.pairs} == {(0, 1)}
    assert len(res.batches) == 5


# ----------------------------------------------------------------------------- determinism


@FAST
@given(n=st.integers(2, 24), seed=st.integers(0, 10_000), both=st.booleans())
def test_deterministic_for_seed(n, seed, both):
    a = swiss_tournament(n, sim_judge(n, 7), 2 * n, seed=seed, both_orders=both)
    b = swiss_tournament(n, sim_judge(n, 7), 2 * n, seed=seed, both_orders=both)
    assert a.pairs == b.pairs and a.batches == b.batches and a.best == b.best
    np.testing.assert_array_equal(a.mu, b.mu)


def test_different_seeds_differ():
    runs = {tuple(swiss_tournament(16, sim_judge(16, 7), 32, seed=s).pairs) for s in range(10)}
    assert len(runs) == 10


# ----------------------------------------------------------------------------- scores


TABLE = {(0, 1): (9, 3), (0, 2): (5, 5), (1, 2): (6, 5)}
# w01 = 6/9 = 2/3 (0 wins); w02 = max(0, tau) = 1/10 (tie); w12 = max(1/9, 1/10) = 1/9 (1 wins)
# mu0 = (2/3 + 1/20) / (2/3 + 1/10) = 43/46
# mu1 = (0 + 1/9) / (2/3 + 1/9) = 1/7
# mu2 = (1/20 + 0) / (1/10 + 1/9) = 9/38
EXPECTED_MU = [Fraction(43, 46), Fraction(1, 7), Fraction(9, 38)]


@pytest.mark.parametrize("seed", range(5))
def test_mu_hand_computed(seed):
    res = swiss_tournament(3, scripted_judge(TABLE), 3, seed=seed)
    assert sorted(key(*p) for p in res.pairs) == [(0, 1), (0, 2), (1, 2)]
    np.testing.assert_allclose(res.mu, [float(x) for x in EXPECTED_MU], rtol=1e-12)
    assert res.best == 0
    # both orders with a slot-symmetric judge doubles every record: same mu
    both = swiss_tournament(3, scripted_judge(TABLE), 6, seed=seed, both_orders=True)
    assert both.calls == 6 and len(both.batches) == 3
    np.testing.assert_allclose(both.mu, res.mu, rtol=1e-12)
    rr = round_robin(3, scripted_judge(TABLE))
    np.testing.assert_allclose(rr.mu, res.mu, rtol=1e-12)


def test_tau_floor_on_weights():
    # tau = 0.2 > 1/9: mu1 = (1/5) / (2/3 + 1/5) = 3/13; mu2 = (1/10) / (1/5 + 1/5) = 1/4
    res = round_robin(3, scripted_judge(TABLE), tau=0.2)
    np.testing.assert_allclose(res.mu, [(2 / 3 + 0.1) / (2 / 3 + 0.2), 3 / 13, 1 / 4])


def test_both_orders_uses_both_records():
    first_slot_wins = lambda pairs: [(7, 4)] * len(pairs)  # pure position bias, w = 1/3
    one = swiss_tournament(2, first_slot_wins, 1, seed=0)
    assert one.mu[one.pairs[0][0]] == 1.0 and one.mu[one.pairs[0][1]] == 0.0
    both = swiss_tournament(2, first_slot_wins, 2, seed=0, both_orders=True)
    assert sorted(both.pairs) == [(0, 1), (1, 0)] and len(both.batches) == 1
    np.testing.assert_allclose(both.mu, [0.5, 0.5])
    assert both.best == 0


def test_unparsed_outputs_are_counted_not_fatal():
    res = swiss_tournament(6, lambda pairs: [None] * len(pairs), 12, seed=0)
    assert res.calls == 12 and res.unparsed == 12
    np.testing.assert_array_equal(res.mu, np.full(6, 0.5))
    assert res.best == 0
    nan_judge = lambda pairs: [(float("nan"), 3.0)] * len(pairs)
    assert swiss_tournament(4, nan_judge, 4, seed=0).unparsed == 4


# ----------------------------------------------------------------------------- selection


@settings(max_examples=200, deadline=None)
@given(correct=st.lists(st.booleans(), min_size=16, max_size=16).filter(any),
       seed=st.integers(0, 2**31 - 1))
def test_perfect_judge_finds_correct(correct, seed):
    correct = np.array(correct)
    res = swiss_tournament(16, perfect_judge(correct), 32, seed=seed)
    assert correct[res.best]


@pytest.mark.parametrize("position", range(16))
def test_perfect_judge_single_correct(position):
    correct = np.zeros(16, bool)
    correct[position] = True
    for seed in range(10):
        res = swiss_tournament(16, perfect_judge(correct), 32, seed=seed)
        assert res.best == position and res.mu[position] == 1.0


def test_pointwise_ties_go_to_lower_index():
    assert pointwise_best([3, 9, 9, 1, 9]) == 1
    assert pointwise_best(np.array([10.0, 10.0])) == 0
    assert pointwise_best([float("nan"), 2.0, 2.0]) == 1
    assert pointwise_best([7]) == 0


def test_single_candidate_needs_no_calls():
    def never(pairs):
        raise AssertionError("judge must not be called")
    for res in (swiss_tournament(1, never, 10, seed=0), random_pairing(1, never, 10, seed=0),
                round_robin(1, never)):
        assert res.best == 0 and res.calls == 0 and res.batches == []


# ----------------------------------------------------------------------------- round robin


@pytest.mark.parametrize("n", range(1, 25))
def test_round_robin_exact_calls_disjoint_rounds(n):
    res = round_robin(n, sim_judge(n, n))
    assert res.calls == n * (n - 1) // 2
    assert sorted(key(*p) for p in res.pairs) == list(itertools.combinations(range(n), 2))
    assert_disjoint_batches(res)
    assert len(circle_rounds(n)) == (n - 1 if n % 2 == 0 else n)
    assert len(res.batches) == (0 if n == 1 else (n - 1 if n % 2 == 0 else n))
    assert round_robin(n, sim_judge(n, n), budget=n).calls == min(n, n * (n - 1) // 2)


# ----------------------------------------------------------------------------- judge + errors


def test_simulated_judge_accuracy_and_position_bias():
    correct = np.array([True, False])
    judge = simulated_judge(correct, rng=np.random.default_rng(0), pairwise_accuracy=0.8)
    out = np.array(judge([(0, 1)] * 20_000 + [(1, 0)] * 20_000))
    assert out.dtype.kind == "i" and out.min() >= 1 and out.max() <= 10
    assert abs(np.mean(out[:20_000, 0] > out[:20_000, 1]) - 0.8) < 0.015
    assert abs(np.mean(out[20_000:, 1] > out[20_000:, 0]) - 0.8) < 0.015
    biased = simulated_judge(correct, rng=np.random.default_rng(0), pairwise_accuracy=0.8,
                             position_bias=0.1)
    out = np.array(biased([(0, 1)] * 20_000 + [(1, 0)] * 20_000))
    assert abs(np.mean(out[:20_000, 0] > out[:20_000, 1]) - 0.9) < 0.015
    assert abs(np.mean(out[20_000:, 1] > out[20_000:, 0]) - 0.7) < 0.015


@pytest.mark.parametrize("call, name", [
    (lambda j: swiss_tournament(0, j, 4, seed=0), "num_candidates"),
    (lambda j: swiss_tournament(4, j, -1, seed=0), "budget"),
    (lambda j: swiss_tournament(4, j, 2.5, seed=0), "budget"),
    (lambda j: swiss_tournament(4, j, 4, seed=-3), "seed"),
    (lambda j: swiss_tournament(4, j, 4, seed=None), "seed"),
    (lambda j: swiss_tournament(4, j, 4, seed=0, window=0), "window"),
    (lambda j: swiss_tournament(4, j, 4, seed=0, d_min=-1), "d_min"),
    (lambda j: swiss_tournament(4, j, 4, seed=0, tau=0.0), "tau"),
    (lambda j: swiss_tournament(4, j, 4, seed=0, both_orders=1), "both_orders"),
    (lambda j: swiss_tournament(4, "judge", 4, seed=0), "judge_fn"),
    (lambda j: swiss_tournament(4, lambda p: [], 4, seed=0), "judge_fn"),
    (lambda j: swiss_tournament(4, lambda p: [(0, 11)] * len(p), 4, seed=0), "judge_fn"),
    (lambda j: random_pairing(4, j, True, seed=0), "budget"),
    (lambda j: round_robin(4, j, tau=2.0), "tau"),
    (lambda j: pointwise_best([]), "scores"),
    (lambda j: simulated_judge(np.array([1, 0]), rng=np.random.default_rng(0)), "correct"),
])
def test_invalid_inputs_name_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call(sim_judge(4, 0))


def test_seed_is_required():
    with pytest.raises(TypeError):
        swiss_tournament(4, sim_judge(4, 0), 4)  # no default seed (docs/design.md principle 1)
