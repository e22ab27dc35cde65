"""Sample rollouts of an RL step as text: `WORKDIR/rollouts.jsonl` and a tracker text.

Every `rl.log_rollouts_every` steps (0 = never) `RLStage` keeps `rl.log_rollouts` of the
step's trained rollouts (`StepSamples.pick`: evenly spaced over the step's rows, standard
rollouts first, then each trained operator round), and the trainer writes them with
`RolloutLog`: one JSON line per rollout in `rollouts.jsonl` and one markdown text
("rollouts") through the run's tracker (`prd_jax.tracking`: TensorBoard, W&B).

A line's fields: `step` (the trainer step the rollout trained, as in metrics.jsonl), `kind`
("standard", or the operator round's name: "operator" for PDR's refine, "draft"), `index`
(its row among the step's rollouts of all kinds), `gold` (the task's gold key), `prompt`
(the prompt the model saw, chat template included), `completion` (the generated text) and
`reward`; `answer_text` is added when the reward graded another text than `completion`
(the part after a thinking block, `runner.answer_texts`).
"""

from __future__ import annotations

import json
import os

import numpy as np

from prd_jax import fileio
from prd_jax.host import is_main
from prd_jax.tracking import Tracker

FILENAME = "rollouts.jsonl"


class StepSamples:
    """The rollouts of one step, kept for the text log; prompts are decoded only for those picked."""

    def __init__(self, tokenizer):
        self.tok = tokenizer
        self.groups = []  # (kind, prompts [R, W] right-aligned, prompt lengths [R], tokens [R, N], lengths [R],
        #                    graded texts, rewards [R], gold keys)

    def add(self, kind: str, prompts, prompt_lengths, tokens, lengths, graded, rewards, golds) -> None:
        """One group of rows: right-aligned prompt ids `[R, W]` with their lengths, completion
        ids `[R, N]` with theirs, the texts the reward graded, the rewards and the gold keys."""
        self.groups.append((kind, np.asarray(prompts), np.asarray(prompt_lengths), np.asarray(tokens),
                            np.asarray(lengths), list(graded), np.asarray(rewards, np.float64), list(golds)))

    @property
    def size(self) -> int:
        return sum(len(g[5]) for g in self.groups)

    def pick(self, n: int) -> list:
        """Records of `n` rows evenly spaced over all rows (all of them when there are fewer)."""
        total = self.size
        chosen = sorted(set(np.round(np.linspace(0, total - 1, min(n, total))).astype(int).tolist())) if total else []
        out, base = [], 0
        for kind, prompts, plen, tokens, lengths, graded, rewards, golds in self.groups:
            for r in range(len(graded)):
                if base + r not in chosen:
                    continue
                width = prompts.shape[1]
                completion = self.tok.decode(tokens[r, :int(lengths[r])].tolist())
                record = {"kind": kind, "index": base + r, "gold": str(golds[r]),
                          "prompt": self.tok.decode(prompts[r, width - int(plen[r]):].tolist()),
                          "completion": completion, "reward": float(rewards[r])}
                if graded[r] != completion:
                    record["answer_text"] = graded[r]
                out.append(record)
            base += len(graded)
        return out


def markdown(step: int, records: list) -> str:
    """The records as one markdown text (TensorBoard renders it; W&B shows it as text)."""
    parts = []
    for r in records:
        parts.append(f"**step {step} · {r['kind']} · row {r['index']} · reward {r['reward']:.3g}** "
                     f"(gold `{r['gold']}`)\n\nprompt:\n```\n{r['prompt']}\n```\ncompletion:\n```\n"
                     f"{r['completion']}\n```")
    return "\n\n".join(parts)


def _step_of(line: str):
    try:
        return json.loads(line)["step"]
    except (json.JSONDecodeError, KeyError, TypeError):
        return None


class RolloutLog:
    """`WORKDIR/rollouts.jsonl` (process 0; lines after the restored step `start` are dropped on
    resume, as metrics.jsonl's) and the tracker's "rollouts" text."""

    def __init__(self, workdir: str, start: int, tracker: Tracker):
        self.tracker, self.path, self.main = tracker, os.path.join(workdir, FILENAME), is_main()
        if self.main and fileio.exists(self.path):
            lines = fileio.read_text(self.path).splitlines(keepends=True)
            fileio.write_text(self.path, "".join(ln for ln in lines if (_step_of(ln) or 0) and _step_of(ln) <= start))

    def write(self, step: int, records: list) -> None:
        if not records:
            return
        if self.main:
            with fileio.open(self.path, "a") as f:
                f.write("".join(json.dumps({"step": step, **r}) + "\n" for r in records))
        self.tracker.text(step, "rollouts", markdown(step, records))
