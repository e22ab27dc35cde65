"""Editable prompt templates and their pre-tokenized pieces (PDR paper §3.1-3.2, App. prompts).

A `Template` is plain text with slots `{problem}`, `{previous}`, `{candidates}`,
`{summary}`, `{candidate}`. `compile_template` renders it once through the model's chat
template (a user turn plus the generation prompt and an optional forced assistant
prefix), splits the rendering at the slots and tokenizes each literal piece. In a round,
prompts are then assembled on device from these pieces and token segments; text is
never re-tokenized. Pieces are tokenized separately, so ids at a piece boundary can
differ from tokenizing the whole rendered string at once (documented trade-off).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Optional

SLOTS = ("problem", "previous", "candidates", "summary", "candidate", "candidate_a", "candidate_b")


@dataclasses.dataclass(frozen=True)
class Template:
    name: str
    user: str
    assistant_prefix: str = ""


SOLVE = Template("solve", (
    "Solve the following problem. Reason step by step and put your final answer in "
    "\\boxed{{}}.\n\nProblem:\n{problem}"))

SR_REFINE = Template("sr_refine", (
    "Here is a problem and an earlier attempt at it. The earlier attempt is unverified and "
    "may contain mistakes. Improve it: check each step, keep what is right, fix what is "
    "wrong, and do not start over from scratch. Put your final answer in \\boxed{{}}.\n\n"
    "Problem:\n{problem}\n\nEarlier attempt:\n{previous}"))

SR_ERROR_ANALYSIS = Template("sr_error_analysis", (
    "Here is a problem and an earlier attempt at it. The earlier attempt is unverified. "
    "First identify and explain each flaw in it. Then write a complete revised solution. "
    "Put your final answer in \\boxed{{}}.\n\nProblem:\n{problem}\n\nEarlier attempt:\n{previous}"))

PDR_TOPK = Template("pdr_topk", (
    "Here is a problem and candidate solutions written by other solvers. The candidates are "
    "unverified and may be wrong. Use what is useful in them, check their steps, resolve "
    "disagreements, and write your own complete solution. Put your final answer in "
    "\\boxed{{}}.\n\nProblem:\n{problem}\n\n{candidates}"))

PDR_SUMMARY = Template("pdr_summary", (
    "Here is a problem and a summary of other solvers' previous reasoning about it. The "
    "summary is unverified context and may be wrong. Use it, check it, and write your own "
    "complete solution. Put your final answer in \\boxed{{}}.\n\nProblem:\n{problem}\n\n"
    "Summary of previous reasoning:\n{summary}"))

DISTILL_SUMMARY = Template("distill_summary", (
    "Below are several attempts at a problem. Write a short summary (at most {kappa} tokens) "
    "that records: where the attempts agree, where they contradict each other, useful "
    "intermediate results, open subgoals, and every final answer seen with how many attempts "
    "reached it. Do not solve the problem yourself.\n\nProblem:\n{problem}\n\n{candidates}"))

# Judges (V1 paper, arXiv 2603.04304 §3): reason first, then close with rating tags. If the
# tags are missing at the reasoning budget, the judge forces "<rating_A>" (etc.) and reads
# the rating from the next-token distribution over "1".."10" (see operators/judges.py).
_MATH_CRITERION = ("Judge only whether the final answer is correct; check the key steps that "
                   "lead to it. Presentation does not matter.")
_CODE_CRITERION = ("Judge whether the program is correct on all valid inputs, including edge "
                   "cases and the stated limits.")
_CODE_PAIR_CRITERION = _CODE_CRITERION + " If both are correct, rate the more robust one higher."


def _pairwise(name: str, criterion: str, noun: str) -> Template:
    return Template(name, (
        f"Here is a problem and two proposed {noun}s, A and B. They are unverified. "
        f"{criterion} Reason briefly, then rate each {noun} from 1 (certainly wrong) to 10 "
        "(certainly correct), ending with exactly <rating_A>n</rating_A> <rating_B>n</rating_B>."
        f"\n\nProblem:\n{{problem}}\n\n### {noun.capitalize()} A\n{{candidate_a}}\n\n"
        f"### {noun.capitalize()} B\n{{candidate_b}}"))


def _pointwise(name: str, criterion: str, noun: str) -> Template:
    return Template(name, (
        f"Here is a problem and a proposed {noun}. It is unverified. {criterion} Reason "
        f"briefly, then rate the {noun} from 1 (certainly wrong) to 10 (certainly correct), "
        f"ending with exactly <rating>n</rating>.\n\nProblem:\n{{problem}}\n\n"
        f"Proposed {noun}:\n{{candidate}}"))


PAIRWISE_MATH = _pairwise("pairwise_math", _MATH_CRITERION, "solution")
PAIRWISE_CODE = _pairwise("pairwise_code", _CODE_PAIR_CRITERION, "program")
POINTWISE_MATH = _pointwise("pointwise_math", _MATH_CRITERION, "solution")
POINTWISE_CODE = _pointwise("pointwise_code", _CODE_CRITERION, "program")

RSA_AGGREGATE = Template("rsa_aggregate", (
    "Here is a problem and several candidate solutions. Some or all of them may be wrong. "
    "Combine the useful ideas and correct steps into one better solution; if all of them are "
    "wrong, try a new strategy. Write a complete solution and put your final answer in "
    "\\boxed{{}}.\n\nProblem:\n{problem}\n\n{candidates}"))

DEFAULT_TEMPLATES = (SOLVE, SR_REFINE, SR_ERROR_ANALYSIS, PDR_TOPK, PDR_SUMMARY, DISTILL_SUMMARY,
                     PAIRWISE_MATH, PAIRWISE_CODE, POINTWISE_MATH, POINTWISE_CODE, RSA_AGGREGATE)

CANDIDATE_HEADER = "### Candidate {index} (unverified)\n"
CANDIDATE_FOOTER = "\n\n"


@dataclasses.dataclass(frozen=True)
class CompiledTemplate:
    """Token pieces around the slots: `pieces[0] slot[0] pieces[1] ... slot[-1] pieces[-1]`."""

    name: str
    pieces: tuple
    slots: tuple
    headers: tuple = ()  # tokenized CANDIDATE_HEADER for index 1..k_max
    footer: tuple = ()


def compile_template(tokenizer, template: Template, *, k_max: int = 16,
                     kappa: Optional[int] = None) -> CompiledTemplate:
    """Render `template` through the chat template and tokenize its literal pieces."""
    text = template.user.replace("{kappa}", str(kappa if kappa is not None else "")).replace("{{}}", "{}")
    found = re.findall(r"\{(\w+)\}", text)
    slots = tuple(s for s in found if s in SLOTS)
    marked = text
    for i, slot in enumerate(slots):
        marked = marked.replace("{" + slot + "}", f"\ue000{i}\ue000", 1)
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": marked}],
                                             add_generation_prompt=True)
    rendered += template.assistant_prefix
    parts = re.split("\ue000\\d+\ue000", rendered)
    if len(parts) != len(slots) + 1:
        raise ValueError(f"template {template.name!r}: the chat template dropped or repeated a slot")
    pieces = tuple(tuple(tokenizer.encode(p)) for p in parts)
    headers = tuple(tuple(tokenizer.encode(CANDIDATE_HEADER.format(index=i + 1))) for i in range(k_max))
    return CompiledTemplate(template.name, pieces, slots, headers, tuple(tokenizer.encode(CANDIDATE_FOOTER)))
