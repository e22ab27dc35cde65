"""A synthetic task with a generation-verification gap: preimage search (issue 15).

    Find x. Work mod 10. Apply +3, *2, ^2. End at 6.

The operations (`+a`, `*a`, `^2`, each kind at most once) are ring operations, so the chain is a polynomial map
mod m; squaring (and `*a` with a not coprime to m) is not invertible, so solving backwards
branches and there is no short procedure for the answer. Checking a guess is the forward
chain, the same computation as the `modchain` family. This is the property the PDR paper
(arXiv 2510.01123 §3, §5) relies on: a refine call that *checks* workspace candidates does
better than a fresh attempt, while on `modchain` checking costs as much as solving.

Traces (one line per tried x; `ok` when the chain ends at the target, else `no`):

    x=3: 3+3=6->6 6*2=12->2 2^2=4->4 vs 6 no
    x=4: 4+3=7->7 7*2=14->4 4^2=16->6 vs 6 ok
    \\boxed{4}

The answer is the last `\\boxed{}` (`final_answer`). A line's "ok" is the model's claim;
grading re-checks the boxed x (`check`). (The answer is boxed rather than read off the last "ok"
line; docs/demo.md describes the task.)

- `solve_response`: tries x from a random start upwards (mod m, no repeats) and stops at
  the first that passes (a Long-CoT guess-and-check trace; the failed tries are what a
  sampled search makes).
- `refine_response`: checks each workspace candidate's answer first (in workspace
  order, each value once), keeps the first that passes, else goes on trying fresh values
  (PDR §3.1 refine: build on the workspace, do not start over when it holds an answer).
- Any x whose chain ends at the target is correct (`check`); the gold `answer` is the
  smallest solution in 0..m-1.

SFT traces (`sft_traces`, PDR §3.3; docs/demo.md, "The workspace and the SFT mix", says how the mix
leaves room for operator RL): the single-pass trace above; a refine trace over a workspace of `pdr_k` drafts,
each a guess-and-check trace cut at `draft_tokens` characters (so most fail without an
answer) or, at rate `false_rate`, a slip that calls a failing x "ok", every draft quoted by
its last `tail_tokens` characters as the eval's candidate truncation does
(`truncation_head=0`); with probability `refine_ignore` the refine response ignores the
workspace and searches afresh; and a pairwise judge trace rating each quoted draft 10 when
its answer checks, else 1 (the pairwise self-verification format that V1 §3 defines in its
paragraph on the pairwise call, as against the pointwise one: both drafts in one prompt,
each rated 1-10 in <rating_A> / <rating_B> tags). Imports numpy, the standard
library and the JAX-free `prd_jax.prompts`.

Difficulty knobs: the chain length (1..4: `^2`; `+a, ^2`; `+a, ^2, *b`; `+a, ^2, *b, -c`) and
the modulus (default 11: a prime, so `+a`, `*b`, `-c` are bijections and `^2` makes two
preimages of each nonzero square). Length 4 has about 10 x 9 x 10 x 6 = 5,400 distinct
problems, so a 4,000-problem training draw leaves thousands unseen.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import re
from typing import Mapping, Optional, Sequence

import numpy as np

from prd_jax import prompts

__all__ = ["FAMILY", "Spec", "make_problem", "generate", "parse_problem", "forward", "solutions",
           "check", "try_line", "parse_tries", "solve_response", "refine_response", "final_answer", "draft",
           "quote", "majority_order", "refine_trace", "judge_trace", "sft_traces", "TRACE_DEFAULTS", "RANKINGS",
           "ideal_rates"]

FAMILY = "preimage"
OPS = ("+", "*", "^", "-")


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
    return value + a if op == "+" else value - a if op == "-" else value * a if op == "*" else value ** 2


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


CHAINS = {1: ("^",), 2: ("+", "^"), 3: ("+", "^", "*"), 4: ("+", "^", "*", "-")}  # kinds per chain length, in order


def _random_ops(rng: np.random.Generator, length: int, m: int) -> tuple:
    """The chain of `length` (1..3): `CHAINS[length]` with random operands. One kind order
    for all problems (`+a`, `^2`, `*b`), each kind at most once, so a line's operand is the
    number after the same symbol in the problem; `^2` makes the map 2-to-1 mod a prime."""
    if length not in CHAINS:
        raise ValueError(f"length={length}; must be one of {sorted(CHAINS)} (chains {CHAINS})")
    return tuple((op, 2 if op == "^" else int(rng.integers(2 if op == "*" else 1, m))) for op in CHAINS[length])


def make_problem(rng: np.random.Generator, length: int, modulus: int = 11, id: Optional[str] = None) -> dict:
    """{id, problem, answer, solution, difficulty, family, modulus, solutions ("1,5": every
    solution in 0..m-1, a string so that rows stay rectangular for seqio)}: a chain of
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
            "modulus": modulus, "solutions": ",".join(str(s) for s in sols)}


def generate(n: int, seed: int, length, modulus: int = 11) -> list:
    """`n` problems from `np.random.default_rng(seed)`; ids "preimage-s{seed}-{i:06d}"; a
    sequence `length` draws each problem's chain length uniformly from it."""
    n, seed = _check_int("n", n, 0), _check_int("seed", seed, 0)
    lengths = (length,) if isinstance(length, (int, np.integer)) else tuple(length)
    if not lengths:
        raise ValueError("length=(); must be an int >= 1 or a non-empty sequence of them")
    rng = np.random.default_rng(seed)
    return [make_problem(rng, lengths[int(rng.integers(len(lengths)))], modulus, id=f"{FAMILY}-s{seed}-{i:06d}")
            for i in range(n)]


_PROBLEM_RE = re.compile(r"Find x\. Work mod (\d+)\. Apply ((?:(?:[-+*]\d+|\^2), )*(?:[-+*]\d+|\^2))\. End at (\d+)\.")
_OP_RE = re.compile(r"([-+*])(\d+)|\^2")


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


def _as_int(answer: Optional[str]) -> Optional[int]:
    """The integer an answer string states (surrounding spaces allowed), else None."""
    match = _INT_RE.fullmatch(answer) if isinstance(answer, str) else None
    return int(match.group(1)) if match else None


def check(problem_text: str, answer: Optional[str]) -> bool:
    """Whether the integer `answer` solves the problem (forward chain in exact integers,
    reduced once at the end). Any such x is correct, also outside 0..m-1."""
    value = _as_int(answer)
    if value is None:
        return False
    spec = parse_problem(problem_text)
    for op, a in spec.ops:
        value = _apply(value, op, a)
    return value % spec.modulus == spec.target % spec.modulus


def try_line(spec: Spec, x: int) -> str:
    """"x=3: 3+3=6->6 6*2=12->2 2^2=4->4 vs 6 no": one guess checked by the forward chain, its
    end compared with the target written beside it."""
    steps, end = forward(spec, x)
    return (f"x={x}: " + " ".join(f"{e}->{v}" for e, v in steps) + f" vs {spec.target}"
            + (" ok" if end == spec.target else " no"))


_TRY_RE = re.compile(r"x=(\d+): (.*) vs (\d+) (ok|no)")


def parse_tries(text: str) -> list:
    """[(x, passed)] of the try lines in a response, in order (other lines are skipped)."""
    return [(int(t.group(1)), t.group(4) == "ok") for t in map(_TRY_RE.fullmatch, text.splitlines()) if t]


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


def _scan(rng: np.random.Generator, m: int, skip=()) -> list:
    """0..m-1 from a random start, counting up and wrapping, without the values in `skip`."""
    start = int(rng.integers(m))
    return [(start + i) % m for i in range(m) if (start + i) % m not in skip]


def solve_response(rng: np.random.Generator, problem: Mapping) -> str:
    """A guess-and-check trace: a random first x, then x+1, x+2, ... mod m (no repeats; the
    next guess is a local step, the random start is the sampled part), up to the first that
    passes."""
    spec = parse_problem(problem["problem"])
    return _search(spec, _scan(rng, spec.modulus), [])


def refine_response(rng: np.random.Generator, problem: Mapping, candidates: Sequence[str],
                    ranked: bool = False) -> str:
    """A refine trace over a workspace: check each candidate's answer, each value once,
    unparsable ones skipped; stop at the first that passes; else scan the values not yet
    checked from a random start (`solve_response`'s order). A ranked workspace (`ranked`:
    a top-k, #1 the best) is checked in rank order; an unranked one from the last-quoted
    candidate back (the box nearest the response: a copy a small model learns from few
    examples)."""
    spec = parse_problem(problem["problem"])
    checked, lines = [], []
    for cand in (candidates if ranked else reversed(candidates)):
        x = _as_int(final_answer(cand))
        if x is None or x % spec.modulus in checked:
            continue
        x %= spec.modulus
        checked.append(x)
        lines.append(try_line(spec, x))
        if lines[-1].endswith(" ok"):
            return "\n".join(lines + [f"\\boxed{{{x}}}"])
    return _search(spec, _scan(rng, spec.modulus, checked), lines)


# ---------------------------------------------------------------- SFT traces (module docstring)

TRACE_DEFAULTS = dict(draft_tokens=128, tail_tokens=32, refine_ignore=0.35, false_rate=0.15, drafts=0,
                      ranking="random")
RANKINGS = ("random", "majority")


def draft(rng: np.random.Generator, problem: Mapping, budget: int, false_rate: float = 0.0) -> str:
    """A draft as a `budget`-token call leaves it (one character is one token; the stop token
    counts): a guess-and-check trace, cut at `budget` characters when it does not fit; with
    probability `false_rate`, a slip instead: the tries up to a failing x, whose line ends "ok"
    (boxed)."""
    spec = parse_problem(problem["problem"])
    if rng.random() < false_rate:
        wrong = [x for x in range(spec.modulus) if not try_line(spec, x).endswith(" ok")]
        if wrong:
            tries = [int(x) for x in rng.permutation(wrong)[:int(rng.integers(1, min(3, len(wrong)) + 1))]]
            lines = [try_line(spec, x) for x in tries]
            lines[-1] = lines[-1][:-len(" no")] + " ok"
            text = "\n".join(lines + [f"\\boxed{{{tries[-1]}}}"])
            return text if len(text) < budget else text[:budget]
    text = solve_response(rng, problem)
    return text if len(text) < budget else text[:budget]


def quote(text: str, tail_tokens: int) -> str:
    """A candidate as the eval quotes it with `truncation_head=0`: its last `tail_tokens` characters."""
    return text if len(text) <= tail_tokens else text[-tail_tokens:]


def majority_order(candidates: Sequence[str]) -> list:
    """Candidate indices by how many candidates share each one's answer (`final_answer` as an
    int), most first, ties to the lower index, those without an answer last: the ranking of
    the eval's `majority` top-k (`operators.verify.majority`)."""
    answers = [final_answer(c) for c in candidates]
    keys = [a if _as_int(a) is None else str(_as_int(a)) for a in answers]
    votes = collections.Counter(k for k in keys if k is not None)
    return sorted(range(len(keys)), key=lambda i: -votes[keys[i]] if keys[i] is not None else 0)


def _ranked(ranking: str) -> bool:
    """Whether a workspace `ranking` orders its candidates (#1 the best); raises naming it."""
    if ranking not in RANKINGS:
        raise ValueError(f"ranking={ranking!r}; allowed: {RANKINGS}")
    return ranking == "majority"


def _workspace(rng, problem, k, draft_tokens, tail_tokens, false_rate, drafts=0, ranking="random") -> list:
    """k quoted drafts: the first k of `drafts` (>= k; 0: k) independent drafts (a random k),
    or with `ranking="majority"` the top k by `majority_order`, rank 1 first."""
    if drafts and drafts < k:
        raise ValueError(f"drafts={drafts} < k={k}: a workspace quotes k of the drafts")
    ds = [draft(rng, problem, draft_tokens, false_rate) for _ in range(max(drafts, k))]
    order = majority_order(ds) if _ranked(ranking) else range(len(ds))
    return [quote(ds[i], tail_tokens) for i in order[:k]]


def refine_trace(rng: np.random.Generator, problem: Mapping, k: int, templates: str = "compact", *,
                 draft_tokens: int = 128, tail_tokens: int = 32, refine_ignore: float = 0.35,
                 false_rate: float = 0.15, drafts: int = 0, ranking: str = "random") -> dict:
    """A PDR refine trace (§3.1): the set's `pdr_topk` prompt over `k` quoted drafts (of
    `drafts`, ranked by `ranking`: `_workspace`), then `refine_response` (or, with
    probability `refine_ignore`, a fresh `solve_response`).
    Returns {id, prompt, response, candidates, ignored}."""
    candidates = _workspace(rng, problem, k, draft_tokens, tail_tokens, false_rate, drafts, ranking)
    ignored = bool(rng.random() < refine_ignore)
    response = (solve_response(rng, problem) if ignored
                else refine_response(rng, problem, candidates, ranked=_ranked(ranking)))
    topk = prompts.template_set(templates)["pdr_topk"]
    prompt = prompts.render(topk, problem=problem["problem"], candidates=prompts.render_candidates(topk, candidates))
    return {"id": problem["id"], "prompt": prompt, "response": response, "candidates": candidates, "ignored": ignored}


def judge_trace(rng: np.random.Generator, problem: Mapping, templates: str = "compact", *,
                draft_tokens: int = 128, tail_tokens: int = 32, false_rate: float = 0.15, **_) -> dict:
    """A pairwise judge trace with no reasoning, in the pairwise self-verification format of
    V1 §3's paragraph on the pairwise call (the set's `pairwise` template: both drafts in one prompt, each rated 1-10 in
    <rating_A> / <rating_B> tags): two quoted drafts, then the forced rating tags
    (`prompts.FORCED_PREFIXES`, V1-Infer's forced read, §4): 10 for a draft whose answer
    checks, else 1.
    Returns {id, prompt, response, candidates, correct}."""
    cands = _workspace(rng, problem, 2, draft_tokens, tail_tokens, false_rate)
    correct = [check(problem["problem"], final_answer(c)) for c in cands]
    prompt = prompts.render(prompts.template_set(templates)["pairwise"], problem=problem["problem"],
                            candidate_a=cands[0], candidate_b=cands[1])
    a, b = (10 if c else 1 for c in correct)
    open_a, open_b = prompts.FORCED_PREFIXES["pairwise"]
    return {"id": problem["id"], "prompt": prompt, "response": f"{open_a}{a}{open_b}{b}</rating_B>",
            "candidates": cands, "correct": correct}


def sft_traces(rng: np.random.Generator, problem: Mapping, *, pdr_fraction: float = 0.0, pdr_k: int = 4,
               sr_fraction: float = 0.0, judge_fraction: float = 0.0, templates: str = "compact",
               **knobs) -> list:
    """SFT rows {id, prompt, response, ...} of one problem: the single-pass trace, then with
    its probability a refine trace over `pdr_k` drafts, an SR trace (a refine over one
    draft, the set's `sr_refine` prompt) and a pairwise judge trace; `knobs` override
    `TRACE_DEFAULTS`. Draws from `rng` in that order."""
    unknown = set(knobs) - set(TRACE_DEFAULTS)
    if unknown:
        raise ValueError(f"preimage trace setting(s) {sorted(unknown)}; allowed: {sorted(TRACE_DEFAULTS)}")
    kw = dict(TRACE_DEFAULTS, **knobs)
    solve = prompts.template_set(templates)["solve"]
    rows = [{"id": problem["id"], "prompt": prompts.render(solve, problem=problem["problem"]),
             "response": problem["solution"]}]
    if rng.random() < pdr_fraction:
        rows.append(refine_trace(rng, problem, pdr_k, templates, **kw))
    if rng.random() < sr_fraction:
        row = refine_trace(rng, problem, 1, templates, **dict(kw, drafts=0, ranking="random"))
        row["prompt"] = prompts.render(prompts.template_set(templates)["sr_refine"], problem=problem["problem"],
                                       previous=row["candidates"][0])
        rows.append(row)
    if rng.random() < judge_fraction:
        rows.append(judge_trace(rng, problem, templates, **kw))
    return rows


def ideal_rates(problems: Sequence[Mapping], rng: np.random.Generator, *, drafts: int = 4, budget: int = 128,
                tail_tokens: int = 32, long_cot_budgets: Sequence[int] = (64, 128, 256, 512),
                refine_ignore: float = 0.0, k: int = 0, ranking: str = "random") -> dict:
    """What the mechanism predicts (docs/demo.md, "The task"): the taught traces executed
    without error, cut at the demo's budgets (one character is one token, the stop token
    counts). Returns {name: (accuracy, mean B_seq)} for "long_cot@B", "pdr" (one round:
    `drafts` drafts of `budget` tokens, `k` of them (0: all; a random k, or the top k by
    `majority_order`) quoted by their last `tail_tokens`, one refine of `budget`; B_seq =
    the first quoted draft + the refine, PDR §3.1) and "best_of_n" over all drafts with a
    perfect judge (B_seq = one draft; judge tokens not counted)."""
    def cut(text, b):
        return text if len(text) < b else text[:b]

    def right(problem, text):
        return check(problem["problem"], final_answer(text))

    out = {f"long_cot@{b}": [] for b in long_cot_budgets}
    out.update(pdr=[], best_of_n=[])
    for p in problems:
        full = solve_response(rng, p)
        for b in long_cot_budgets:
            out[f"long_cot@{b}"].append((right(p, cut(full, b)), min(len(full) + 1, b)))
        ds = [cut(solve_response(rng, p), budget) for _ in range(drafts)]
        order = majority_order(ds) if _ranked(ranking) else rng.permutation(drafts)
        ws = [quote(ds[i], tail_tokens) for i in order[:k or drafts]]
        refine = (solve_response(rng, p) if rng.random() < refine_ignore
                  else refine_response(rng, p, ws, ranked=_ranked(ranking)))
        first = min(len(ds[order[0]]) + 1, budget)
        out["pdr"].append((right(p, cut(refine, budget)), first + min(len(refine) + 1, budget)))
        out["best_of_n"].append((any(right(p, d) for d in ds), first))
    return {k: (float(np.mean([a for a, _ in v])), float(np.mean([b for _, b in v]))) for k, v in out.items()}
