"""The preimage family (issue 15): solver vs brute force, checker exactness, traces parse back."""

import numpy as np
import pytest

from prd_jax.data import preimage as pre


def _brute(spec):
    return [x for x in range(spec.modulus) if pre.forward(spec, x)[1] == spec.target]


def test_hand_example():
    text = "Find x. Work mod 10. Apply +3, *2, ^2. End at 6."
    spec = pre.parse_problem(text)
    assert spec == pre.Spec(10, (("+", 3), ("*", 2), ("^", 2)), 6)
    # (x+3)*2 mod 10 is in {4, 6} (squares ending in 6); (x+3) mod 5 in {2, 3}: x in {4, 9, 5, 0}
    assert pre.solutions(text) == [0, 4, 5, 9]
    assert pre.try_line(spec, 3) == "x=3: 3+3=6->6 6*2=12->2 2^2=4->4 no"
    assert pre.try_line(spec, 4) == "x=4: 4+3=7->7 7*2=14->4 4^2=16->6 ok"


@pytest.mark.parametrize("seed,modulus", [(0, 10), (1, 12), (2, 7), (3, 31)])
def test_solver_matches_brute_force(seed, modulus):
    for p in pre.generate(60, seed, (1, 2, 3, 4), modulus):
        spec = pre.parse_problem(p["problem"])
        assert pre.solutions(p["problem"]) == _brute(spec)
        assert p["answer"] == str(min(_brute(spec)))
        assert [int(s) for s in p["solutions"]] == _brute(spec)


@pytest.mark.parametrize("seed", [0, 5])
def test_checker_accepts_exactly_the_valid_x(seed):
    for p in pre.generate(40, seed, (2, 3), 10):
        valid = set(_brute(pre.parse_problem(p["problem"])))
        for x in range(-20, 30):
            assert pre.check(p["problem"], str(x)) == (x % 10 in valid), (p["problem"], x)
        assert not pre.check(p["problem"], None)
        assert not pre.check(p["problem"], "4.0")
        assert not pre.check(p["problem"], "x")


def test_search_needs_branching():
    """Solving backwards branches: many problems have several solutions, and ^2 is in every chain."""
    probs = pre.generate(200, 0, 3, 10)
    assert all("^2" in p["problem"] for p in probs)
    assert np.mean([len(p["solutions"]) > 1 for p in probs]) > 0.3


def test_solve_trace_parses_back():
    rng = np.random.default_rng(0)
    for p in pre.generate(50, 1, (2, 3), 10):
        resp = pre.solve_response(rng, p)
        tries = pre.parse_tries(resp)
        xs = [x for x, _ in tries]
        assert len(set(xs)) == len(xs)  # no repeats
        assert [ok for _, ok in tries] == [False] * (len(tries) - 1) + [True]
        assert all(ok == pre.check(p["problem"], str(x)) for x, ok in tries)
        assert pre.final_answer(resp) == str(xs[-1])
        assert pre.check(p["problem"], pre.final_answer(resp))


def test_refine_checks_the_workspace_first():
    rng = np.random.default_rng(0)
    p = {"problem": "Find x. Work mod 10. Apply +3, *2, ^2. End at 6."}
    wrong, right = "x=3: ...\n\\boxed{3}", "\\boxed{9}"
    resp = pre.refine_response(rng, p, [wrong, "no answer", wrong, right])
    assert pre.parse_tries(resp) == [(3, False), (9, True)]
    assert pre.final_answer(resp) == "9"
    resp = pre.refine_response(rng, p, [wrong, "\\boxed{1}"])  # no candidate passes: fresh tries
    tries = pre.parse_tries(resp)
    assert tries[:2] == [(3, False), (1, False)] and tries[-1][1] and len({x for x, _ in tries}) == len(tries)
    assert pre.check(p["problem"], pre.final_answer(resp))


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="length"):
        pre.generate(2, 0, 0)
    with pytest.raises(ValueError, match="modulus"):
        pre.generate(2, 0, 2, modulus=2)
    with pytest.raises(ValueError, match="not a preimage problem"):
        pre.parse_problem("Start at 3. Work mod 10. Apply +1. Answer?")
