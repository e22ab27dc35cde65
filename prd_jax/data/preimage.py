"""A synthetic task with a generation-verification gap: preimage search (issue 15).

    Find x. Work mod 10. Apply +3, *2, ^2. End at 6.

The operations (`+a`, `*a`, `^2`) are ring operations, so the chain is a polynomial map
mod m; squaring (and `*a` with a not coprime to m) is not invertible, so solving backwards
branches and there is no short procedure for the answer. Checking a guess is the forward
chain, the same computation as the `modchain` family. This is the property the PDR paper
(arXiv 2510.01123 §3, §5) relies on: a refine call that *checks* workspace candidates does
better than a fresh attempt, while on `modchain` checking costs as much as solving.

Traces (one line per tried x; `ok` when the chain ends at the target, else `no`):

    x=3: 3+3=6->6 6*2=12->2 2^2=4->4 no
    x=4: 4+3=7->7 7*2=14->4 4^2=16->6 ok
    \\boxed{4}

- `solve_response`: tries x in a random order without repeats and stops at the first that
  passes (a Long-CoT guess-and-check trace; the failed tries are what a sampled search makes).
- `refine_response`: checks each workspace candidate's boxed answer first (in workspace
  order, each value once), keeps the first that passes, else goes on trying fresh values
  (PDR §3.1 refine: build on the workspace, do not start over when it holds an answer).
- Any x whose chain ends at the target is correct (`check`); the gold `answer` is the
  smallest solution in 0..m-1.

Difficulty knobs: the chain length and the modulus. Only numpy and the standard library
are imported.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from typing import Mapping, Optional, Sequence

import numpy as np

__all__ = ["FAMILY", "Spec", "make_problem", "generate", "parse_problem", "forward", "solutions",
           "check", "try_line", "parse_tries", "solve_response", "refine_response", "final_answer"]

FAMILY = "preimage"
OPS = ("+", "*", "^")


@dataclasses.dataclass(frozen=True)
class Spec:
    """One problem: modulus, operations ((op, operand); "^" has operand 2) and target."""

    modulus: int
    ops: tuple
    target: int


def _check_int(name: str, value, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name}={value!r}; must be an int >= {low}")
    return int(value)


def _apply(value: int, op: str, a: int) -> int:
    return value + a if op == "+" else value * a if op == "*" else value ** 2


def forward(spec: Spec, x: int) -> tuple[list, int]:
    """The chain's steps `[(expr, reduced)]` from x (reduced mod m after each step) and its end."""
    m, value, steps = spec.modulus, x % spec.modulus, []
    for op, a in spec.ops:
        raw = _apply(value, op, a)
        expr = f"{value}^2={raw}" if op == "^" else f"{value}{op}{a}={raw}"
        value = raw % m
        steps.append((expr, value))
    return steps, value


def _text(spec: Spec) -> str:
    ops = ", ".join("^2" if op == "^" else f"{op}{a}" for op, a in spec.ops)
    return f"Find x. Work mod {spec.modulus}. Apply {ops}. End at {spec.target}."


def _random_ops(rng: np.random.Generator, length: int, m: int) -> tuple:
    """`length` operations with at least one `^2` (so the map is not a bijection for m > 2)."""
    while True:
        ops = []
        for _ in range(length):
            op = OPS[int(rng.integers(3))]
            ops.append((op, 2 if op == "^" else int(rng.integers(2 if op == "*" else 1, m))))
        if any(op == "^" for op, _ in ops):
            return tuple(ops)


def make_problem(rng: np.random.Generator, length: int, modulus: int = 10, id: Optional[str] = None) -> dict:
    """{id, problem, answer, solution, difficulty, family, modulus, solutions}: a chain of
    `length` operations from a random x; the target is where that x lands, so a solution exists.
    The default id is a digest of the problem text."""
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a numpy.random.Generator (explicit seed), got {type(rng).__name__}")
    length = _check_int("length", length, 1)
    modulus = _check_int("modulus", modulus, 3)
    ops = _random_ops(rng, length, modulus)
    x = int(rng.integers(modulus))
    spec = Spec(modulus, ops, forward(Spec(modulus, ops, 0), x)[1])
    text = _text(spec)
    sols = solutions(text)
    return {"id": id or f"{FAMILY}-{hashlib.sha1(text.encode()).hexdigest()[:12]}", "problem": text, "answer": str(sols[0]),
            "solution": solve_response(rng, {"problem": text}), "difficulty": length, "family": FAMILY,
            "modulus": modulus, "solutions": [str(s) for s in sols]}


def generate(n: int, seed: int, length, modulus: int = 10) -> list:
    """`n` problems from `np.random.default_rng(seed)`; ids "preimage-s{seed}-{i:06d}"; a
    sequence `length` draws each problem's chain length uniformly from it."""
    n, seed = _check_int("n", n, 0), _check_int("seed", seed, 0)
    lengths = (length,) if isinstance(length, (int, np.integer)) else tuple(length)
    if not lengths:
        raise ValueError("length=(); must be an int >= 1 or a non-empty sequence of them")
    rng = np.random.default_rng(seed)
    return [make_problem(rng, lengths[int(rng.integers(len(lengths)))], modulus, id=f"{FAMILY}-s{seed}-{i:06d}")
            for i in range(n)]


_PROBLEM_RE = re.compile(r"Find x\. Work mod (\d+)\. Apply ((?:(?:[+*]\d+|\^2), )*(?:[+*]\d+|\^2))\. End at (\d+)\.")
_OP_RE = re.compile(r"([+*])(\d+)|\^2")


def parse_problem(text: str) -> Spec:
    """Parse a problem text back into a `Spec`; ValueError if it is not a preimage problem."""
    match = _PROBLEM_RE.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"problem text is not a preimage problem: {text!r:.120}")
    ops = tuple(("^", 2) if op.group(0) == "^2" else (op.group(1), int(op.group(2)))
                for op in _OP_RE.finditer(match.group(2)))
    return Spec(int(match.group(1)), ops, int(match.group(3)))


def solutions(problem_text: str) -> list:
    """Every x in 0..m-1 that solves the problem, by backward search: the preimage set of the
    target under each operation, last operation first (not the forward chain `check` uses)."""
    spec = parse_problem(problem_text)
    m = spec.modulus
    targets = {spec.target % m}
    for op, a in reversed(spec.ops):
        targets = {v for v in range(m) if _apply(v, op, a) % m in targets}
    return sorted(targets)


_INT_RE = re.compile(r"\s*(-?\d{1,12})\s*")


def check(problem_text: str, answer: Optional[str]) -> bool:
    """Whether the integer `answer` solves the problem (forward chain in exact integers,
    reduced once at the end). Any such x is correct, also outside 0..m-1."""
    match = _INT_RE.fullmatch(answer) if isinstance(answer, str) else None
    if match is None:
        return False
    spec = parse_problem(problem_text)
    value = int(match.group(1))
    for op, a in spec.ops:
        value = _apply(value, op, a)
    return value % spec.modulus == spec.target % spec.modulus


def try_line(spec: Spec, x: int) -> str:
    """"x=3: 3+3=6->6 6*2=12->2 2^2=4->4 no": one guess checked by the forward chain."""
    steps, end = forward(spec, x)
    return f"x={x}: " + " ".join(f"{e}->{v}" for e, v in steps) + (" ok" if end == spec.target else " no")


_TRY_RE = re.compile(r"x=(\d+): (.*) (ok|no)")


def parse_tries(text: str) -> list:
    """[(x, passed)] of the try lines in a response, in order (other lines are skipped)."""
    return [(int(t.group(1)), t.group(3) == "ok") for t in map(_TRY_RE.fullmatch, text.splitlines()) if t]


_BOXED_RE = re.compile(r"\\boxed\{([^{}]*)\}")


def final_answer(text: str) -> Optional[str]:
    """Content of the last `\\boxed{...}`, stripped; None if there is none."""
    found = _BOXED_RE.findall(text) if isinstance(text, str) else []
    return found[-1].strip() if found else None


def _search(spec: Spec, order: Sequence[int], lines: list) -> str:
    for x in order:
        lines.append(try_line(spec, x))
        if lines[-1].endswith(" ok"):
            return "\n".join(lines + [f"\\boxed{{{x}}}"])
    raise AssertionError("unreachable: every problem has a solution in 0..m-1")


def solve_response(rng: np.random.Generator, problem: Mapping) -> str:
    """A guess-and-check trace: x in a random order, no repeats, up to the first that passes."""
    spec = parse_problem(problem["problem"])
    return _search(spec, [int(x) for x in rng.permutation(spec.modulus)], [])


def refine_response(rng: np.random.Generator, problem: Mapping, candidates: Sequence[str]) -> str:
    """A refine trace over a workspace: check each candidate's boxed answer (in order, each
    value once, unparsable ones skipped); stop at the first that passes; else try the
    values not yet checked in a random order."""
    spec = parse_problem(problem["problem"])
    checked, lines = [], []
    for cand in candidates:
        answer = final_answer(cand)
        match = _INT_RE.fullmatch(answer) if answer is not None else None
        x = int(match.group(1)) % spec.modulus if match else None
        if x is None or x in checked:
            continue
        checked.append(x)
        lines.append(try_line(spec, x))
        if lines[-1].endswith(" ok"):
            return "\n".join(lines + [f"\\boxed{{{x}}}"])
    rest = [int(x) for x in rng.permutation(spec.modulus) if int(x) not in checked]
    return _search(spec, rest, lines)
