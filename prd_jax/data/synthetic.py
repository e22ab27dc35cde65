"""Synthetic verifiable reasoning tasks for tiny from-scratch models, plus a char-level vocab.

Two families of modular-arithmetic problems; a difficulty-d problem has d operations and
its chain of thought has d lines, then `\\boxed{answer}`. All text is ASCII.

- "modchain" (default mod 10): run a value forward through the operations.

      Start at 7. Work mod 10. Apply +5, *3, -4. Answer?
      7+5=12->2
      2*3=6->6
      6-4=2->2
      \\boxed{2}

- "modinverse" (default mod 11, prime moduli only): recover the start by undoing the
  operations in reverse; division is multiplication by the modular inverse.

      Start at x. Work mod 11. Apply +5, *3, -4. End at 2. Find x.
      2+4=6->6
      6/3=6*4=24->2
      2-5=-3->8
      \\boxed{8}

`solve` parses the problem text and computes the answer by another route (one evaluation
in exact integers, or brute force over x), so it checks the generator. `corrupt_solution`
makes a plausible wrong solution (one slip, propagated), and `pdr_trace` builds PDR refine
traces (PDR paper, arXiv 2510.01123 §3.2): k candidates, `num_wrong` of them wrong, then a
correct solution; `sr_trace` builds SR refine traces (one earlier attempt, then a correct
solution) and `judge_trace` V1 pairwise judge traces (two candidates, then rating tags).
Every trace renders its prompt with a named template set (`prompts.TEMPLATE_SETS`).
`CharVocab` is a character tokenizer with the interface of
`prd_jax.model.tokenizer.Tokenizer` that the operators and `data.vocab.HFVocabulary` use.

Module level imports numpy, the standard library and `prd_jax.prompts` (no JAX);
TensorFlow/seqio are imported inside the functions that need them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import re
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import numpy as np

from prd_jax import prompts
from prd_jax.data import preimage
from prd_jax.prompts import FORCED_PREFIXES, template_set

log = logging.getLogger(__name__)

__all__ = ["FAMILIES", "DEFAULT_MODULUS", "Spec", "make_problem", "generate", "held_out", "parse_problem",
           "solve", "final_answer", "corrupt_solution",
           "solve_example", "pdr_trace", "sr_trace", "judge_trace", "sft_traces", "sft_split_rows", "as_messages",
           "write_jsonl", "register_synthetic_task", "register_problems_task", "register_sft_task",
           "CharVocab"]

FAMILIES = ("modchain", "modinverse", preimage.FAMILY)
DEFAULT_MODULUS = {"modchain": 10, "modinverse": 11, preimage.FAMILY: 11}
Difficulty = Union[int, Sequence[int]]


@dataclasses.dataclass(frozen=True)
class Spec:
    """A problem: `value` is the start (modchain) or the end value (modinverse)."""

    family: str
    modulus: int
    value: int
    ops: tuple  # ((op, operand), ...), op in "+-*"


# ---------------------------------------------------------------- validation


def _check_int(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name}={value!r}; must be an int >= {low}")
    return int(value)


def _check_family(family: str) -> str:
    if family not in FAMILIES:
        raise ValueError(f"family={family!r}; allowed: {FAMILIES}")
    return family


def _is_prime(n: int) -> bool:
    return n >= 2 and all(n % p for p in range(2, int(n ** 0.5) + 1))


def _check_modulus(family: str, modulus: Optional[int]) -> int:
    if modulus is None:
        return DEFAULT_MODULUS[family]
    m = _check_int("modulus", modulus, 3)
    if family == "modinverse" and not _is_prime(m):
        raise ValueError(f"modulus={m}; family 'modinverse' needs a prime modulus >= 3")
    return m


def _check_rng(rng: Any) -> np.random.Generator:
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a numpy.random.Generator (explicit seed), got {type(rng).__name__}")
    return rng


# ---------------------------------------------------------------- generation


def _problem_text(spec: Spec) -> str:
    ops = ", ".join(f"{op}{a}" for op, a in spec.ops)
    head = f"Work mod {spec.modulus}. Apply {ops}."
    if spec.family == "modchain":
        return f"Start at {spec.value}. {head} Answer?"
    return f"Start at x. {head} End at {spec.value}. Find x."


def _step(value: int, op: str, operand: int, m: int, undo: bool) -> tuple[str, int]:
    """One chain-of-thought line "v+a=raw->r" and its reduced result (undo: inverse op)."""
    if undo:
        if op == "*":
            inv = pow(operand, -1, m)
            raw = value * inv
            return f"{value}/{operand}={value}*{inv}={raw}", raw
        op = "-" if op == "+" else "+"
    raw = value + operand if op == "+" else value - operand if op == "-" else value * operand
    return f"{value}{op}{operand}={raw}", raw


def _solution_lines(spec: Spec, slip: Optional[tuple] = None) -> tuple[list[str], int]:
    """The CoT lines and the final answer; `slip=(step, kind, delta)` injects one error.

    kind "raw": the unreduced result is off by delta; kind "mod": the reduction is.
    Later steps are computed correctly from the wrong value, so the error propagates.
    """
    m, value = spec.modulus, spec.value
    undo = spec.family == "modinverse"
    ops = reversed(spec.ops) if undo else spec.ops
    lines = []
    for i, (op, a) in enumerate(ops):
        expr, raw = _step(value, op, a, m, undo)
        if slip is not None and slip[0] == i and slip[1] == "raw":
            raw += slip[2]
            expr = expr[:expr.rindex("=") + 1] + str(raw)
        value = raw % m
        if slip is not None and slip[0] == i and slip[1] == "mod":
            value = (value + slip[2]) % m
        lines.append(f"{expr}->{value}")
    return lines, value


def _render_solution(lines: list[str], answer: int) -> str:
    return "\n".join(lines + [f"\\boxed{{{answer}}}"])


def _random_spec(rng: np.random.Generator, difficulty: int, family: str, m: int) -> Spec:
    ops = []
    for _ in range(difficulty):
        op = "+-*"[int(rng.integers(3))]
        low = 2 if op == "*" else 1
        ops.append((op, int(rng.integers(low, m))))
    return Spec(family, m, int(rng.integers(m)), tuple(ops))


def make_problem(rng: np.random.Generator, difficulty: int, family: str = "modchain",
                 modulus: Optional[int] = None, id: Optional[str] = None) -> dict:
    """One problem: {id, problem, answer, solution, difficulty, family, modulus}.

    `difficulty` (>= 1) is the number of operations and of CoT lines. The default id is a
    digest of the problem text.
    """
    _check_rng(rng)
    difficulty = _check_int("difficulty", difficulty, 1)
    family = _check_family(family)
    m = _check_modulus(family, modulus)
    if family == preimage.FAMILY:  # the search family (issue 15): its own module
        return preimage.make_problem(rng, difficulty, m, id=id)
    spec = _random_spec(rng, difficulty, family, m)
    text = _problem_text(spec)
    lines, answer = _solution_lines(spec)
    if id is None:
        id = f"{family}-{hashlib.sha1(text.encode()).hexdigest()[:12]}"
    return {"id": id, "problem": text, "answer": str(answer), "solution": _render_solution(lines, answer),
            "difficulty": difficulty, "family": family, "modulus": m}


def _difficulties(difficulty: Difficulty) -> tuple[int, ...]:
    if isinstance(difficulty, (int, np.integer)) and not isinstance(difficulty, bool):
        return (_check_int("difficulty", difficulty, 1),)
    if isinstance(difficulty, Sequence) and not isinstance(difficulty, str) and len(difficulty):
        return tuple(_check_int("difficulty", d, 1) for d in difficulty)
    raise ValueError(f"difficulty={difficulty!r}; must be an int >= 1 or a non-empty sequence of them")


def generate(n: int, seed: int, difficulty: Difficulty, family: str = "modchain",
             modulus: Optional[int] = None) -> list[dict]:
    """`n` problems from `np.random.default_rng(seed)`; ids "{family}-s{seed}-{i:06d}"
    (family "preimage": `preimage.generate`, the chain length drawn the same way).

    With a sequence `difficulty`, each problem draws its difficulty uniformly from it.
    Problems may repeat (low difficulties have few distinct problems); ids never do.
    """
    n = _check_int("n", n, 0)
    seed = _check_int("seed", seed, 0)
    choices = _difficulties(difficulty)
    family = _check_family(family)
    modulus = _check_modulus(family, modulus)
    if family == preimage.FAMILY:
        return preimage.generate(n, seed, choices, modulus)
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        d = choices[int(rng.integers(len(choices)))] if len(choices) > 1 else choices[0]
        out.append(make_problem(rng, d, family, modulus, id=f"{family}-s{seed}-{i:06d}"))
    return out


def held_out(n: int, seed: int, difficulty: Difficulty, seen, family: str = "modchain",
             modulus: Optional[int] = None, max_draws: int = 100) -> list[dict]:
    """`n` problems whose text is not in `seen` (e.g. every training problem's text).

    Draws `generate(max_draws * n, seed, ...)` in order and keeps unseen texts, each once.
    Low difficulties have few distinct problems (difficulty 1 mod 10: 260), so they may be
    entirely seen; raises ValueError if fewer than `n` unseen problems turn up.
    """
    n = _check_int("n", n, 0)
    seen, out = set(seen), []
    for p in generate(max_draws * n, seed, difficulty, family, modulus):
        if len(out) == n:
            break
        if p["problem"] not in seen:
            seen.add(p["problem"])
            out.append(p)
    if len(out) < n:
        raise ValueError(f"only {len(out)} of n={n} problems of difficulty={difficulty!r} are unseen; "
                         "use higher difficulties or fewer problems")
    return out


# ---------------------------------------------------------------- independent solver

_PROBLEM_RE = re.compile(
    r"Start at (x|\d+)\. Work mod (\d+)\. Apply ((?:[-+*]\d+, )*[-+*]\d+)\."
    r"(?: End at (\d+)\. Find x\.| Answer\?)")
_OP_RE = re.compile(r"([-+*])(\d+)")


def parse_problem(text: str) -> Spec:
    """Parse a problem text back into a `Spec`; ValueError if it is not one of ours."""
    match = _PROBLEM_RE.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None or (match.group(1) == "x") != (match.group(4) is not None):
        raise ValueError(f"problem text is not a synthetic problem: {text!r:.120}")
    ops = tuple((op, int(a)) for op, a in _OP_RE.findall(match.group(3)))
    if match.group(1) == "x":
        return Spec("modinverse", int(match.group(2)), int(match.group(4)), ops)
    return Spec("modchain", int(match.group(2)), int(match.group(1)), ops)


def _evaluate(start: int, ops: tuple) -> int:
    """Apply the operations in exact integers (no intermediate reduction)."""
    value = start
    for op, a in ops:
        value = value + a if op == "+" else value - a if op == "-" else value * a
    return value


def solve(problem_text: str) -> str:
    """The answer of a problem text, computed without the generator's step logic.

    modchain: one exact-integer evaluation reduced once at the end (valid since + - * are
    compatible with reduction). modinverse: brute force over x in 0..m-1; ValueError unless
    exactly one x works.
    """
    spec = parse_problem(problem_text)
    m = spec.modulus
    if spec.family == "modchain":
        return str(_evaluate(spec.value, spec.ops) % m)
    xs = [x for x in range(m) if _evaluate(x, spec.ops) % m == spec.value % m]
    if len(xs) != 1:
        raise ValueError(f"problem has {len(xs)} solutions, expected 1: {problem_text!r:.120}")
    return str(xs[0])


_BOXED_RE = re.compile(r"\\boxed\{([^{}]*)\}")


def final_answer(text: str) -> Optional[str]:
    """Content of the last `\\boxed{...}` in `text`, stripped; None if there is none."""
    found = _BOXED_RE.findall(text) if isinstance(text, str) else []
    return found[-1].strip() if found else None


# ---------------------------------------------------------------- corruption and PDR traces


def corrupt_solution(rng: np.random.Generator, problem: Mapping) -> str:
    """A plausible wrong solution of `problem` (a row from `make_problem`/`generate`).

    One slip (an unreduced result or a reduction off by +-1 or +-2) at a random step, with
    later steps correct from the wrong value. The final answer always differs from the
    correct one: slips whose error vanishes (e.g. under *5 mod 10) are not used.
    """
    _check_rng(rng)
    spec = parse_problem(problem["problem"])
    _, correct = _solution_lines(spec)
    slips = [(s, kind, delta) for s in range(len(spec.ops)) for kind in ("raw", "mod")
             for delta in (-2, -1, 1, 2)]
    for j in rng.permutation(len(slips)):
        lines, answer = _solution_lines(spec, slips[j])
        if answer != correct:
            return _render_solution(lines, answer)
    raise AssertionError("unreachable: a slip at the last step always changes the answer")


def solve_example(problem: Mapping, templates: str = "default") -> dict:
    """SFT row {id, prompt, response}: the set's SOLVE prompt and the gold chain of thought."""
    solve = prompts.template_set(templates)["solve"]
    return {"id": problem["id"], "prompt": prompts.render(solve, problem=problem["problem"]),
            "response": problem["solution"]}


def pdr_trace(rng: np.random.Generator, problem: Mapping, k: int, num_wrong: int,
              templates: str = "default") -> dict:
    """A PDR refine trace: k candidates (`num_wrong` corrupted, at random positions) and a correct response.

    Returns {id, prompt_candidates, wrong (per candidate), prompt (the set's PDR_TOPK user
    text with the rendered workspace), response (the gold solution)}.
    """
    _check_rng(rng)
    k = _check_int("k", k, 1)
    num_wrong = _check_int("num_wrong", num_wrong, 0)
    if num_wrong > k:
        raise ValueError(f"num_wrong={num_wrong}; must be <= k={k}")
    topk = prompts.template_set(templates)["pdr_topk"]
    wrong = np.zeros(k, bool)
    wrong[rng.permutation(k)[:num_wrong]] = True
    candidates = [corrupt_solution(rng, problem) if w else problem["solution"] for w in wrong]
    prompt = prompts.render(topk, problem=problem["problem"], candidates=prompts.render_candidates(topk, candidates))
    return {"id": problem["id"], "prompt_candidates": candidates, "wrong": wrong.tolist(),
            "prompt": prompt, "response": problem["solution"]}


def sr_trace(rng: np.random.Generator, problem: Mapping, wrong: bool, templates: str = "default") -> dict:
    """An SR refine trace (PDR paper §2, sequential refinement): one earlier attempt,
    corrupted if `wrong`, then the gold solution. Returns {id, previous, wrong, prompt, response}."""
    previous = corrupt_solution(_check_rng(rng), problem) if wrong else problem["solution"]
    prompt = prompts.render(prompts.template_set(templates)["sr_refine"], problem=problem["problem"], previous=previous)
    return {"id": problem["id"], "previous": previous, "wrong": bool(wrong), "prompt": prompt,
            "response": problem["solution"]}


JUDGE_RATINGS = (1, 10)  # (wrong, correct): the ends of V1's 1-10 scale


def judge_trace(rng: np.random.Generator, problem: Mapping, wrong: tuple, templates: str = "default") -> dict:
    """A pairwise judge trace with no reasoning, in V1's pairwise self-verification format
    (V1 paper §3, the paragraph that defines the pairwise self-verification call, not the
    pointwise one nor the tournament: one prompt quotes both candidates, A and B, and the judge rates each 1-10,
    closing with <rating_A>n</rating_A> <rating_B>n</rating_B>; the set's `pairwise`
    template). Candidates are the gold solution, or corrupted where `wrong[i]`; the response
    is the forced-rating tags a judge with a zero reasoning budget completes
    (`prompts.FORCED_PREFIXES`, the forced read of V1-Infer, §4): 10 for a correct
    candidate, 1 for a wrong one. Returns {id, candidates, wrong, prompt, response}."""
    _check_rng(rng)
    cands = [corrupt_solution(rng, problem) if w else problem["solution"] for w in wrong]
    prompt = prompts.render(prompts.template_set(templates)["pairwise"], problem=problem["problem"],
                           candidate_a=cands[0], candidate_b=cands[1])
    a, b = (JUDGE_RATINGS[0] if w else JUDGE_RATINGS[1] for w in wrong)
    open_a, open_b = FORCED_PREFIXES["pairwise"]
    return {"id": problem["id"], "candidates": cands, "wrong": [bool(w) for w in wrong], "prompt": prompt,
            "response": f"{open_a}{a}{open_b}{b}</rating_B>"}


def as_messages(row: Mapping) -> dict:
    """{id, prompt, response} -> {id, messages: [user, assistant]}."""
    return {"id": row["id"], "messages": [{"role": "user", "content": row["prompt"]},
                                          {"role": "assistant", "content": row["response"]}]}


# ---------------------------------------------------------------- JSONL


def _row_kind(row: Any, where: str) -> str:
    if not isinstance(row, Mapping):
        raise ValueError(f"{where}: expected a dict, got {type(row).__name__}")
    kinds = {"problems": ("id", "problem", "answer"), "sft": ("prompt", "response")}
    for kind, keys in kinds.items():
        if all(isinstance(row.get(key), str) and row[key].strip() for key in keys):
            return kind
    messages = row.get("messages")
    if isinstance(messages, list) and messages and all(
            isinstance(m, Mapping) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in messages):
        return "messages"
    raise ValueError(f"{where}: need non-empty string keys {list(kinds['problems'])} or "
                     f"{list(kinds['sft'])}, or 'messages' as a list of {{role, content}}")


def write_jsonl(path: Union[str, os.PathLike], rows: Sequence[Mapping]) -> int:
    """Write rows as JSON lines; returns the count.

    All rows must be one kind: problems {id, problem, answer, ...} (readable by
    `data.jsonl.read_jsonl`; ids must be unique), SFT {prompt, response, ...} or
    {messages, ...}. Raises ValueError naming the first bad row.
    """
    kind, seen = None, set()
    for i, row in enumerate(rows):
        this = _row_kind(row, f"rows[{i}]")
        if kind is not None and this != kind:
            raise ValueError(f"rows[{i}] is a {this!r} row but rows[0] is {kind!r}; write one kind per file")
        kind = this
        if "id" in row:
            if row["id"] in seen:
                raise ValueError(f"rows[{i}]: duplicate id {row['id']!r}")
            seen.add(row["id"])
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(dict(row), ensure_ascii=False) + "\n")
    return len(rows)


# ---------------------------------------------------------------- seqio task


def register_synthetic_task(name: str, vocabulary: Any, splits: Mapping[str, tuple[int, int]],
                            difficulty: Difficulty = (1, 2, 3, 4, 5, 6), family: str = "modchain",
                            modulus: Optional[int] = None, kind: str = "solve", k: int = 4,
                            num_wrong: Difficulty = (0, 1, 2, 3),
                            render_inputs: Optional[Callable[[str], str]] = None,
                            templates: str = "default") -> str:
    """Register (or replace) seqio task `name` over generated problems; returns `name`.

    `splits` maps split -> (num_examples, seed); seeds must differ between splits. kind
    "solve": inputs = SOLVE prompt, targets = gold CoT. kind "pdr": inputs = PDR_TOPK prompt
    with k candidates (num_wrong drawn from `num_wrong` per example), targets = gold CoT.
    `render_inputs` maps the user text to the model's input text (e.g. a chat template).
    Features as in `data.seqio_tasks`: `inputs` without EOS, `targets` with EOS, plus `id`,
    `answer` and the `*_pretokenized` strings. `vocabulary` is a seqio.Vocabulary, e.g.
    `data.vocab.HFVocabulary(CharVocab())`. `templates` names the prompt set
    (`prompts.TEMPLATE_SETS`).
    """
    if kind not in ("solve", "pdr"):
        raise ValueError(f"kind={kind!r}; allowed: 'solve', 'pdr'")
    if not splits:
        raise ValueError("splits is empty; give {split: (num_examples, seed)}")
    for split, (n, seed) in splits.items():
        _check_int(f"splits[{split!r}] num_examples", n, 1)
        _check_int(f"splits[{split!r}] seed", seed, 0)
    seeds = [seed for _, seed in splits.values()]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"splits={dict(splits)}: each split needs its own seed")
    wrong_choices = _difficulties(num_wrong) if kind == "pdr" else ()
    if kind == "pdr":
        k = _check_int("k", k, 1)
        if max(wrong_choices) > k:
            raise ValueError(f"num_wrong={num_wrong!r}; every value must be <= k={k}")
    _difficulties(difficulty)
    template_set(templates)
    modulus = _check_modulus(_check_family(family), modulus)

    import seqio
    from prd_jax.data.tf_cpu import tf

    cache: dict[str, dict] = {}

    def examples(split: str) -> dict:
        if split not in cache:
            n, seed = splits[split]
            problems = generate(n, seed, difficulty, family, modulus)
            rng = np.random.default_rng([seed, 1])
            rows = []
            for p in problems:
                if kind == "solve":
                    user = solve_example(p, templates)["prompt"]
                else:
                    w = wrong_choices[int(rng.integers(len(wrong_choices)))]
                    user = pdr_trace(rng, p, k, w, templates)["prompt"]
                rows.append((p["id"], render_inputs(user) if render_inputs else user,
                             p["solution"], p["answer"]))
            cache[split] = {key: [r[j] for r in rows]
                            for j, key in enumerate(("id", "inputs", "targets", "answer"))}
        return cache[split]

    def dataset_fn(split: str, shuffle_files: bool, seed: Optional[int] = None):
        del shuffle_files, seed  # one in-memory shard
        return tf.data.Dataset.from_tensor_slices(examples(split))

    source = seqio.FunctionDataSource(dataset_fn, splits=tuple(splits),
                                      num_input_examples={s: n for s, (n, _) in splits.items()})
    if name in seqio.TaskRegistry.names():
        seqio.TaskRegistry.remove(name)
    seqio.TaskRegistry.add(
        name, source=source,
        preprocessors=[seqio.preprocessors.tokenize, seqio.preprocessors.append_eos],
        output_features={
            "inputs": seqio.Feature(vocabulary=vocabulary, add_eos=False, dtype=tf.int32),
            "targets": seqio.Feature(vocabulary=vocabulary, add_eos=True, dtype=tf.int32),
        },
        metric_fns=[])
    return name


def sft_traces(rng: np.random.Generator, problem: Mapping, *, pdr_fraction: float = 0.0, pdr_k: int = 2,
               sr_fraction: float = 0.0, judge_fraction: float = 0.0, templates: str = "default",
               **family_knobs) -> list[dict]:
    """SFT rows {id, prompt, response, ...} of one problem: its single-pass trace, then, each
    with its probability, a PDR refine trace (`pdr_k` candidates, 0..k of them wrong,
    uniformly), an SR refine trace (the earlier attempt wrong with probability 1/2) and a
    pairwise judge trace (each candidate wrong with probability 1/2). Draws from `rng` in
    that order, so one rng over a problem list gives one reproducible trace list.
    A "preimage" problem gets `preimage.sft_traces` (its drafts and knobs, `family_knobs`);
    the other families take no knobs."""
    if problem.get("family") == preimage.FAMILY:
        return preimage.sft_traces(rng, problem, pdr_fraction=pdr_fraction, pdr_k=pdr_k, sr_fraction=sr_fraction,
                                   judge_fraction=judge_fraction, templates=templates, **family_knobs)
    if family_knobs:
        raise ValueError(f"trace setting(s) {sorted(family_knobs)} apply to the 'preimage' family only")
    rows = [solve_example(problem, templates)]
    if rng.random() < pdr_fraction:
        rows.append(pdr_trace(rng, problem, pdr_k, int(rng.integers(0, pdr_k + 1)), templates))
    if rng.random() < sr_fraction:
        rows.append(sr_trace(rng, problem, bool(rng.integers(2)), templates))
    if rng.random() < judge_fraction:
        rows.append(judge_trace(rng, problem, tuple(bool(w) for w in rng.integers(0, 2, 2)), templates))
    return rows


def sft_split_rows(seed: int, num_train: int, num_eval: int, difficulty: Difficulty,
                   family: str = "modchain", templates: str = "default", **fractions: Any
                   ) -> dict[str, list[dict]]:
    """{"train", "validation"}: trace rows {id, inputs: prompt text, targets: response} of
    `generate(num_train, seed)` then `generate(num_eval, seed + 10_000)` problems, with ONE
    `np.random.default_rng(seed)` for both (train first), as `train.setup` always drew them.
    `fractions`: the `sft_traces` keywords (pdr_fraction, pdr_k, sr_fraction, judge_fraction).
    A split with no problems is left out."""
    rng = np.random.default_rng(_check_int("seed", seed, 0))
    out = {}
    for split, n, split_seed in (("train", num_train, seed), ("validation", num_eval, seed + 10_000)):
        rows = [{"id": r["id"], "inputs": r["prompt"], "targets": r["response"]}
                for p in generate(n, split_seed, difficulty, family)
                for r in sft_traces(rng, p, templates=templates, **fractions)]
        if rows:
            out[split] = rows
    return out


def _register_rows_task(name: str, splits: tuple, make_rows: Callable[[], dict[str, list[dict]]]) -> str:
    """Register (or replace) a source-only seqio task whose `splits` hold the rows of
    `make_rows()` (computed once, on first read): text and int columns, no preprocessors."""
    import seqio
    from prd_jax.data.tf_cpu import tf

    cache: dict[str, dict[str, list[dict]]] = {}

    def rows() -> dict[str, list[dict]]:
        if "rows" not in cache:
            cache["rows"] = make_rows()
        return cache["rows"]

    def dataset_fn(split: str, shuffle_files: bool, seed: Optional[int] = None):
        del shuffle_files, seed  # one in-memory shard, in generation order
        split_rows = rows()[split]
        return tf.data.Dataset.from_tensor_slices({key: [r[key] for r in split_rows] for key in split_rows[0]})

    if name in seqio.TaskRegistry.names():
        seqio.TaskRegistry.remove(name)
    seqio.TaskRegistry.add(name, source=seqio.FunctionDataSource(dataset_fn, splits=tuple(splits)),
                           preprocessors=[], output_features={}, metric_fns=[])
    return name


def register_problems_task(name: str, splits: Mapping[str, tuple[int, int]], difficulty: Difficulty,
                           family: str = "modchain", modulus: Optional[int] = None) -> str:
    """Register (or replace) seqio task `name` whose split `s` holds `generate(*splits[s], ...)`:
    the problem rows {id, problem, answer, solution, difficulty, family, modulus}. `splits`
    maps split -> (num_problems >= 1, seed). Returns `name`."""
    for split, (n, seed) in splits.items():
        _check_int(f"splits[{split!r}] num_problems", n, 1)
        _check_int(f"splits[{split!r}] seed", seed, 0)
    _difficulties(difficulty)
    modulus = _check_modulus(_check_family(family), modulus)
    if not splits:
        raise ValueError("splits is empty; give {split: (num_problems, seed)}")
    return _register_rows_task(name, tuple(splits), lambda: {split: generate(n, seed, difficulty, family, modulus)
                                              for split, (n, seed) in splits.items()})


def register_sft_task(name: str, seed: int, num_train: int, num_eval: int, difficulty: Difficulty,
                      family: str = "modchain", templates: str = "default", **fractions: Any) -> str:
    """Register (or replace) seqio task `name` over `sft_split_rows(...)`: splits "train" and
    (with num_eval > 0) "validation", text features `inputs` (the user prompt) and `targets`
    (the response): the SFT contract of `train.setup`. Returns `name`."""
    _check_int("num_train", num_train, 1)
    _check_int("num_eval", num_eval, 0)
    _difficulties(difficulty)
    _check_family(family)
    allowed = ["pdr_fraction", "pdr_k", "sr_fraction", "judge_fraction"]
    allowed += list(preimage.TRACE_DEFAULTS) if family == preimage.FAMILY else []
    unknown = set(fractions) - set(allowed)
    if unknown:
        raise ValueError(f"unknown trace settings {sorted(unknown)} for family {family!r}; allowed: {allowed}")
    splits = ("train", "validation") if num_eval else ("train",)
    return _register_rows_task(name, splits, lambda: sft_split_rows(seed, num_train, num_eval, difficulty,
                                                                    family, templates, **fractions))


# ---------------------------------------------------------------- char-level vocabulary

SPECIAL_TOKENS = ("<|pad|>", "<|eos|>", "<|unk|>", "<|system|>", "<|user|>", "<|assistant|>")
ASCII_CHARS = "\n\t" + "".join(chr(c) for c in range(32, 127))


class CharVocab:
    """Character tokenizer for from-scratch models: one id per ASCII character.

    Ids: 0 pad, 1 eos, 2 unk, 3-5 the role markers `<|system|>`, `<|user|>`,
    `<|assistant|>`, then one id per character of `chars` (default: newline, tab and
    printable ASCII; vocab_size 103). Pad is 0, as seqio pads. Special-token texts in the
    input encode to their ids. Characters outside `chars` encode to `unk_id`, with one
    warning per character (`unknown_chars` lists them). No BOS. Stop ids: eos and
    `<|user|>`. Chat format: "<|user|>{content}\\n" per user turn (same for system),
    "<|assistant|>{content}<|eos|>" per assistant turn, generation prompt "<|assistant|>".
    """

    def __init__(self, chars: str = ASCII_CHARS):
        if not chars or len(set(chars)) != len(chars):
            raise ValueError(f"chars={chars!r:.80}; must be a non-empty string without repeats")
        self.specials = SPECIAL_TOKENS
        self.chars = chars
        self.pad_id, self.eos_id, self.unk_id = 0, 1, 2
        self.system_id, self.user_id, self.assistant_id = 3, 4, 5
        self.bos_id = None
        self.add_bos_token = False
        self.vocab_size = len(self.specials) + len(chars)
        self.stop_ids = (self.eos_id, self.user_id)
        self._id_of = {c: len(self.specials) + i for i, c in enumerate(chars)}
        self._id_of.update({s: i for i, s in enumerate(self.specials)})
        self._text_of = list(self.specials) + list(chars)
        self._special_re = re.compile("(" + "|".join(re.escape(s) for s in self.specials) + ")")
        self._warned: set = set()

    def __repr__(self) -> str:
        digest = hashlib.sha1(self.chars.encode("utf-8")).hexdigest()[:12]
        return f"CharVocab(vocab_size={self.vocab_size}, chars_sha1={digest})"

    def unknown_chars(self, text: str) -> list[str]:
        """Sorted characters of `text` (outside special tokens) that encode to unk."""
        plain = self._special_re.sub("", text)
        return sorted({c for c in plain if c not in self._id_of})

    def encode(self, text: str, add_bos: Optional[bool] = False) -> list[int]:
        """Ids of `text`: special-token texts as one id, every other character as one id."""
        if add_bos:
            raise ValueError("add_bos=True; CharVocab has no BOS token")
        ids = []
        for i, part in enumerate(self._special_re.split(text)):
            if i % 2:
                ids.append(self._id_of[part])
                continue
            for c in part:
                tid = self._id_of.get(c)
                if tid is None:
                    if c not in self._warned:
                        self._warned.add(c)
                        log.warning("CharVocab: character %r is not in the vocabulary; encoded as "
                                    "unk_id=%d", c, self.unk_id)
                    tid = self.unk_id
                ids.append(tid)
        return ids

    def decode(self, ids, skip_special: bool = True) -> str:
        """Text of `ids`; special tokens (and ids >= vocab_size, read as unk) dropped if `skip_special`."""
        out = []
        n_special = len(self.specials)
        for tid in ids:
            tid = int(tid)
            if not 0 <= tid < self.vocab_size:
                tid = self.unk_id
            if tid < n_special and skip_special:
                continue
            out.append(self._text_of[tid])
        return "".join(out)

    def token_to_id(self, token: str) -> Optional[int]:
        return self._id_of.get(token)

    def id_to_token(self, token_id: int) -> Optional[str]:
        return self._text_of[token_id] if 0 <= token_id < self.vocab_size else None

    def apply_chat_template(self, messages: Sequence[Mapping[str, Any]],
                            add_generation_prompt: bool = True) -> str:
        """Render [{"role", "content"}, ...] in the class docstring's chat format."""
        opening = {"system": "<|system|>", "user": "<|user|>", "assistant": "<|assistant|>"}
        parts = []
        for i, message in enumerate(messages):
            role, content = message.get("role"), message.get("content")
            if role not in opening:
                raise ValueError(f"messages[{i}].role={role!r}; allowed: {tuple(opening)}")
            if not isinstance(content, str):
                raise ValueError(f"messages[{i}].content must be a str, got {type(content).__name__}")
            closing = "<|eos|>" if role == "assistant" else "\n"
            parts.append(opening[role] + content + closing)
        if add_generation_prompt:
            parts.append("<|assistant|>")
        return "".join(parts)

    def encode_chat(self, messages: Sequence[Mapping[str, Any]],
                    add_generation_prompt: bool = True) -> list[int]:
        """Ids of `apply_chat_template(messages, add_generation_prompt)`."""
        return self.encode(self.apply_chat_template(messages, add_generation_prompt))
