"""Prompt templates, their named sets and their pre-tokenized pieces (PDR paper §3.1-3.2, App. B.2).

Plain text: this module imports nothing from JAX or from the rest of prd_jax, so data and
SFT-trace code import it without pulling in the operators.

Wording: the texts are ours. They follow the PDR paper's prompts (App. B.2) in substance as
§3.1 describes them (the appendix text itself was not available to us): a refine call
improves on the workspace rather than solving afresh, and the global summary keeps the
candidates' agreements, contradictions, intermediate results and open subgoals. The
judge prompts follow V1 (arXiv 2603.04304 §4) in substance, also in our words.

A `Template` is plain text with slots from `SLOTS` (`{problem}`, `{previous}`,
`{candidates}`, `{summary}`, `{candidate}`, `{candidate_a}`, `{candidate_b}`) and the
compile-time parameter `{kappa}`; any other `{name}` is refused by `render` and
`compile_template`, naming the slot and the template.

Sets are keyed by role: every set maps the same roles (`solve`, `sr_refine`, ...,
`pairwise`, `pointwise`, `rsa_aggregate`) to its own wording, and declares its domain
(`SET_DOMAINS`: "math" or "code"). "default" is math, "compact" the synthetic demo's
few-character set, "code" speaks of programs: the answer is one fenced Python block.

Code artifacts (issue 45 §1). A code task grades one of two artifacts (`ARTIFACTS`): a
"function" called with arguments (HumanEval; LiveCodeBench problems with starter code) or a
whole "program" run on standard input (LiveCodeBench problems without starter code, every
CodeContests problem). One batch may mix both (LiveCodeBench), and a template is compiled
once into token pieces, so the "code" set's instructions are artifact-neutral: every role
points at the task's Format line ("the form the task's Format line asks for") and never
names a function, a signature or standard input. The artifact enters per problem through
the `{problem}` segment: each code task's `problem_text` ends with `format_line(artifact,
...)`, the one wording of what its grader runs (`Task.artifact(row)` declares it). So the
solve, refine, distill, judge and RSA prompts of a problem all say what its grader checks,
and a round still assembles prompts on device from the same pieces.

An operator that needs a role of its own adds it to each set with `add_template`
(docs/extending.md, "An operator"). `compile_template` renders it once through the model's chat
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
PARAMETERS = ("kappa",)  # filled when a template is compiled (the summary budget), not per call
CANDIDATE_HEADER = "### Candidate {index} (unverified)\n"
CANDIDATE_FOOTER = "\n\n"


@dataclasses.dataclass(frozen=True)
class Template:
    """User-turn text with slots; each workspace candidate is wrapped in header/footer."""

    name: str
    user: str
    assistant_prefix: str = ""
    candidate_header: str = CANDIDATE_HEADER  # "{index}" is the candidate's 1-based number
    candidate_footer: str = CANDIDATE_FOOTER


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

# Refine prompts (PDR §3.1-3.2): build a better answer on the workspace, not a fresh one.
PDR_TOPK = Template("pdr_topk", (
    "Here is a problem and earlier candidate solutions to it. The candidates are unverified "
    "and may contain mistakes. Build an improved solution from them: check their steps, keep "
    "what is correct, fix what is wrong, and resolve where they disagree; do not discard them "
    "and start over from scratch. Write the improved solution in full and put your final "
    "answer in \\boxed{{}}.\n\nProblem:\n{problem}\n\n{candidates}"))

PDR_SUMMARY = Template("pdr_summary", (
    "Here is a problem and a summary of earlier attempts at it: where they agree and "
    "contradict each other, their intermediate results and the open subgoals. The summary is "
    "unverified and may contain mistakes. Build an improved solution on it: check its "
    "results, keep what is correct, fix what is wrong, and close the open subgoals; do not "
    "ignore it and start over from scratch. Write the improved solution in full and put your "
    "final answer in \\boxed{{}}.\n\nProblem:\n{problem}\n\nSummary of earlier attempts:\n{summary}"))

# Global summary (PDR §3.1): agreements, contradictions, intermediate results, open subgoals.
_SUMMARY_HEAD = ("Below are several attempts at a problem. Write a short summary (at most {kappa} tokens) "
                 "that records: where the attempts agree, where they contradict each other, useful "
                 "intermediate results, and the subgoals that remain open")
_SUMMARY_TAIL = ". Do not solve the problem yourself.\n\nProblem:\n{problem}\n\n{candidates}"
DISTILL_SUMMARY = Template("distill_summary", _SUMMARY_HEAD + _SUMMARY_TAIL)
# Variant (ours, PDR.summary_vote_counts): also tally the final answers.
DISTILL_SUMMARY_VOTES = Template("distill_summary_votes", (
    _SUMMARY_HEAD + ", and every final answer seen with how many attempts reached it" + _SUMMARY_TAIL))

# Judges (V1 paper, arXiv 2603.04304 §4): reason first, then close with rating tags. A tag
# missing (or out of 1..10) when the judge stops or reaches its reasoning budget is forced:
# "<rating_A>" (etc.) is appended and the rating read from the next-token distribution over
# "1".."10" (see operators/judges.py, which also says what is counted as unparsed).
_MATH_CRITERION = ("Judge only whether the final answer is correct; check the key steps that "
                   "lead to it. Presentation does not matter.")
_CODE_CRITERION = ("Judge whether the program is correct on all valid inputs, including edge "
                   "cases and the stated limits, and whether it has the form the task's Format line asks for.")
_CODE_PAIR_CRITERION = _CODE_CRITERION + " If both are correct, rate the more robust one higher."


# What a judge is forced to continue with when its reasoning ends without rating tags (V1
# §4): the open tag(s) before each rating read (operators/judges.py; SFT judge traces).
FORCED_PREFIXES = {"pairwise": ("\n<rating_A>", "</rating_A> <rating_B>"), "pointwise": ("\n<rating>",)}


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


PAIRWISE_MATH = _pairwise("pairwise", _MATH_CRITERION, "solution")
PAIRWISE_CODE = _pairwise("pairwise", _CODE_PAIR_CRITERION, "program")
POINTWISE_MATH = _pointwise("pointwise", _MATH_CRITERION, "solution")
POINTWISE_CODE = _pointwise("pointwise", _CODE_CRITERION, "program")

RSA_AGGREGATE = Template("rsa_aggregate", (
    "Here is a problem and several candidate solutions. Some or all of them may be wrong. "
    "Combine the useful ideas and correct steps into one better solution; if all of them are "
    "wrong, try a new strategy. Write a complete solution and put your final answer in "
    "\\boxed{{}}.\n\nProblem:\n{problem}\n\n{candidates}"))

DEFAULT_TEMPLATES = (SOLVE, SR_REFINE, SR_ERROR_ANALYSIS, PDR_TOPK, PDR_SUMMARY, DISTILL_SUMMARY,
                     DISTILL_SUMMARY_VOTES, PAIRWISE_MATH, POINTWISE_MATH, RSA_AGGREGATE)

# Compact set for small models trained from scratch (the demo): the same slots and calls in
# a few characters, so that with a character vocabulary B_seq counts reasoning rather than
# instructions. A model must be trained on the set it is run with (data.templates,
# rl.templates and the eval config's `templates` name the set).
_HEAD, _FOOT = "#{index}\n", "\n"


def _compact(name: str, user: str) -> Template:
    return Template(name, user, candidate_header=_HEAD, candidate_footer=_FOOT)


COMPACT_TEMPLATES = (
    _compact("solve", "Solve: {problem}"),
    _compact("sr_refine", "Improve: {problem}\nEarlier:\n{previous}"),
    _compact("sr_error_analysis", "Find flaws, then fix: {problem}\nEarlier:\n{previous}"),
    _compact("pdr_topk", "Refine: {problem}\n{candidates}"),
    _compact("pdr_summary", "Refine: {problem}\nSummary:\n{summary}"),
    _compact("distill_summary", "Summarize in {kappa}: {problem}\n{candidates}"),
    _compact("distill_summary_votes", "Summarize, count answers, in {kappa}: {problem}\n{candidates}"),
    _compact("pairwise", "Compare: {problem}\nA:\n{candidate_a}\nB:\n{candidate_b}"),
    _compact("pointwise", "Rate: {problem}\n{candidate}"),
    _compact("rsa_aggregate", "Combine: {problem}\n{candidates}"),
)

# Code set (V1 arXiv 2603.04304 §4 evaluates on code): the same roles and slots, speaking of
# programs; every generating call ends with its code in one ```python fenced block (a code task
# extracts the last one), in the form the problem's Format line names (`format_line`): the
# instruction is artifact-neutral, the problem segment carries the artifact (module docstring).
_PROGRAM = ("Write your complete code in the form the task's Format line asks for, with any imports it "
            "needs, in one ```python fenced block at the end of your answer.")

# The artifacts a code task's grader runs (`Task.artifact`), and the Format line each problem ends with.
ARTIFACTS = ("function", "program")


def format_line(artifact: str, *, entry_point: str = "", starter: str = "") -> str:
    """The "Format:" line a code problem's text ends with (issue 45 §1): what its grader runs.

    "function": the function `entry_point` (HumanEval: its stub is the problem text above) or
    the `starter` code's class and method (LiveCodeBench functional problems), kept with its
    name and signature; "program": a whole program reading standard input and writing standard
    output. ValueError names the artifact and the allowed ones, or a function with neither."""
    if artifact == "program":
        return ("Format: write a complete Python program that reads the input from standard input and writes "
                "the answer to standard output (do not just test the examples). Put the program in one "
                "```python fenced block.")
    if artifact != "function":
        raise ValueError(f"artifact={artifact!r}; allowed: {ARTIFACTS}")
    stub = starter.strip("\n")
    if stub.strip():
        return ("Format: complete the starter code below. Keep its class, method name and signature, write the "
                "whole solution, and put it in one ```python fenced block. It is called with the test "
                "arguments.\n\n"
                f"```python\n{stub}\n```")
    if not entry_point:
        raise ValueError("format_line('function'): give the function's entry_point or its starter code")
    return (f"Format: write the complete function `{entry_point}` above, keeping its name and signature, with "
            "any imports it needs, in one ```python fenced block. It is called with the test arguments.")


_CODE_HEAD = "### Candidate program {index} (unverified)\n"


def _code(name: str, user: str) -> Template:
    return Template(name, user, candidate_header=_CODE_HEAD)


CODE_TEMPLATES = (
    _code("solve", f"Solve the following programming task. Reason briefly about the approach and the edge "
                   f"cases, then {_PROGRAM[0].lower()}{_PROGRAM[1:]}\n\nTask:\n{{problem}}"),
    _code("sr_refine", ("Here is a programming task and an earlier program for it. The earlier program is "
                        "unverified and may contain bugs. Improve it: check its logic and edge cases, keep "
                        "what is right, fix what is wrong, and do not start over from scratch. "
                        f"{_PROGRAM}\n\nTask:\n{{problem}}\n\nEarlier program:\n{{previous}}")),
    _code("sr_error_analysis", ("Here is a programming task and an earlier program for it. The earlier program "
                                "is unverified. First identify and explain each bug in it, including missed "
                                f"edge cases. Then write a corrected program. {_PROGRAM}\n\n"
                                "Task:\n{problem}\n\nEarlier program:\n{previous}")),
    _code("pdr_topk", ("Here is a programming task and earlier candidate programs for it. The candidates are "
                       "unverified and may contain bugs. Build an improved program from them: check their "
                       "logic and edge cases, keep what is correct, fix what is wrong, and resolve where they "
                       f"disagree; do not discard them and start over from scratch. {_PROGRAM}\n\n"
                       "Task:\n{problem}\n\n{candidates}")),
    _code("pdr_summary", ("Here is a programming task and a summary of earlier programs for it: where they "
                          "agree and differ, the approaches tried, the edge cases handled or missed and the "
                          "open problems. The summary is unverified and may contain mistakes. Build an "
                          "improved program on it: keep what is correct, fix what is wrong, and close the "
                          f"open problems; do not ignore it and start over from scratch. {_PROGRAM}\n\n"
                          "Task:\n{problem}\n\nSummary of earlier programs:\n{summary}")),
    _code("distill_summary", ("Below are several programs written for a task. Write a short summary (at most "
                              "{kappa} tokens) that records: where the programs agree, where they differ, "
                              "the approaches tried, the edge cases handled or missed, whether each has the form "
                              "the task's Format line asks for, and the problems that remain open. Do not write "
                              "the program yourself.\n\nTask:\n{problem}\n\n"
                              "{candidates}")),
    _code("distill_summary_votes", ("Below are several programs written for a task. Write a short summary (at "
                                    "most {kappa} tokens) that records: where the programs agree, where they "
                                    "differ, the approaches tried, the edge cases handled or missed, whether "
                                    "each has the form the task's Format line asks for, the problems that "
                                    "remain open, and how many programs take each distinct approach. Do not "
                                    "write the program yourself.\n\nTask:\n{problem}\n\n{candidates}")),
    PAIRWISE_CODE,
    POINTWISE_CODE,
    _code("rsa_aggregate", ("Here is a programming task and several candidate programs. Some or all of them "
                            "may be wrong. Combine the correct ideas and the edge-case handling into one "
                            "better program; if all of them are wrong, try a new approach. "
                            f"{_PROGRAM}\n\nTask:\n{{problem}}\n\n{{candidates}}")),
)

ROLES = tuple(t.name for t in DEFAULT_TEMPLATES)  # the roles every built-in set fills
TEMPLATE_SETS = {name: {t.name: t for t in ts} for name, ts in
                 (("default", DEFAULT_TEMPLATES), ("compact", COMPACT_TEMPLATES), ("code", CODE_TEMPLATES))}
SET_DOMAINS = {"default": "math", "compact": "math", "code": "code"}  # the domain a set's judges assess
DOMAINS = ("math", "code")


def _check_set(name: str) -> None:
    if name not in TEMPLATE_SETS:
        raise ValueError(f"templates={name!r}; allowed: {sorted(TEMPLATE_SETS)}")


def template_set(name: str) -> dict:
    """{role: Template} of a named set (a copy); ValueError naming the allowed sets."""
    _check_set(name)
    return dict(TEMPLATE_SETS[name])


def set_domain(name: str) -> str:
    """The domain ("math" or "code") whose judge criteria set `name` uses."""
    _check_set(name)
    return SET_DOMAINS[name]


def template_slots(template: Template) -> tuple:
    """The slots of `template` in order of appearance; ValueError naming the first unknown
    `{name}` and the template (`{{}}` is a literal `{}`; `{kappa}` a compile-time parameter)."""
    found = re.findall(r"\{(\w+)\}", template.user.replace("{{}}", ""))
    for name in found:
        if name not in SLOTS and name not in PARAMETERS:
            raise ValueError(f"template {template.name!r} has unknown slot {{{name}}}; allowed slots: "
                             f"{SLOTS}, compile-time parameters: {PARAMETERS}")
    return tuple(found)


def add_template(set_name: str, template: Template, *, replace: bool = False) -> Template:
    """Add role `template.name` to set `set_name` (an operator's own prompt). Its slots are
    checked now; a role the set already has with another text raises unless `replace`."""
    _check_set(set_name)
    template_slots(template)
    have = TEMPLATE_SETS[set_name].get(template.name)
    if have is not None and have != template and not replace:
        raise ValueError(f"template set {set_name!r} already has role {template.name!r} with another text; "
                         "pass replace=True to override it")
    TEMPLATE_SETS[set_name][template.name] = template
    return template


def render(template: Template, **slots: str) -> str:
    """The user text of `template` with its slots filled (`{{}}` becomes `{}`); every slot
    must be given, and a slot unknown to `SLOTS` raises naming it and the template."""
    template_slots(template)

    def fill(match: re.Match) -> str:
        name = match.group(1)
        if name is None:
            return "{}"
        if name not in slots:
            raise ValueError(f"template {template.name!r} needs slot {name!r}; given: {sorted(slots)}")
        return str(slots[name])
    return re.sub(r"\{\{\}\}|\{(\w+)\}", fill, template.user)


def render_candidates(template: Template, candidates) -> str:
    """The workspace text of `candidates` under `template`'s header and footer, numbered from 1."""
    return "".join(template.candidate_header.format(index=i + 1) + c + template.candidate_footer
                   for i, c in enumerate(candidates))


@dataclasses.dataclass(frozen=True)
class CompiledTemplate:
    """Token pieces around the slots: `pieces[0] slot[0] pieces[1] ... slot[-1] pieces[-1]`."""

    name: str
    pieces: tuple
    slots: tuple
    headers: tuple = ()  # tokenized candidate headers for index 1..k_max
    footer: tuple = ()


def compile_template(tokenizer, template: Template, *, k_max: int = 16,
                     kappa: Optional[int] = None) -> CompiledTemplate:
    """Render `template` through the chat template and tokenize its literal pieces
    (`tokenizer`: `apply_chat_template` and `encode`). An unknown slot raises (`template_slots`)."""
    slots = tuple(s for s in template_slots(template) if s not in PARAMETERS)
    text = template.user.replace("{kappa}", str(kappa if kappa is not None else "")).replace("{{}}", "{}")
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
    headers = tuple(tuple(tokenizer.encode(template.candidate_header.format(index=i + 1))) for i in range(k_max))
    return CompiledTemplate(template.name, pieces, slots, headers, tuple(tokenizer.encode(template.candidate_footer)))
