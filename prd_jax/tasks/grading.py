"""Host callbacks that make the operators' oracle and majority vote task-generic.

`TaskGrader(task, tokenizer)` is `Context.grader`: `correct(cand_tok, cand_len, ans_tok,
ans_len) -> bool[R]` decodes each candidate and its gold key (the tokens of
`task.gold_key(row)`), recovers the row (`task.row_for_key`: math needs only the answer;
code looks the task id up among the rows given to `add_rows`) and returns
`task.oracle_many` (PDR arXiv 2510.01123 §4.1 and App. D.1, oracle workspaces). `TaskGrouper(task,
tokenizer)` is `Context.answer_ids`: `(cand_tok [B, N, L], cand_len [B, N]) -> int32 [B, N]`,
the index of the first candidate of the row with the same `task.answer_key` (-1: no
answer), for majority voting (V1 arXiv 2603.04304 §4 baseline). Both are deterministic:
a result depends only on the tokens and the registered rows.
"""

from __future__ import annotations

import threading

import numpy as np

from prd_jax.tasks.base import get_task

__all__ = ["TaskGrader", "TaskGrouper"]


class TaskGrader:
    """Oracle grading on the host for any task (see the module docstring)."""

    def __init__(self, task, tokenizer, rows=()):
        self.task = get_task(task)
        self.tokenizer = tokenizer
        self._rows: dict = {}
        self._lock = threading.Lock()
        self.add_rows(rows)

    def add_rows(self, rows) -> None:
        """Register problem rows under their gold keys (a key always maps to the same row)."""
        with self._lock:
            for row in rows:
                self._rows[self.task.gold_key(row)] = row

    def correct(self, cand_tok, cand_len, ans_tok, ans_len) -> np.ndarray:
        rows, texts = [], []
        with self._lock:
            known = dict(self._rows)
        for ct, cl, at, al in zip(np.asarray(cand_tok), np.asarray(cand_len), np.asarray(ans_tok),
                                  np.asarray(ans_len)):
            texts.append(self.tokenizer.decode(ct[:cl].tolist()))
            rows.append(self.task.row_for_key(self.tokenizer.decode(at[:al].tolist()), known))
        return np.asarray(self.task.oracle_many(rows, texts), bool).reshape(len(texts))


class TaskGrouper:
    """Majority-vote grouping on the host for any task (see the module docstring)."""

    def __init__(self, task, tokenizer):
        self.task = get_task(task)
        self.tokenizer = tokenizer

    def __call__(self, cand_tok, cand_len) -> np.ndarray:
        cand_tok, cand_len = np.asarray(cand_tok), np.asarray(cand_len)
        out = np.full(cand_len.shape, -1, np.int32)
        for b in range(cand_len.shape[0]):
            first: dict = {}
            for i in range(cand_len.shape[1]):
                key = self.task.answer_key(self.tokenizer.decode(cand_tok[b, i, :cand_len[b, i]].tolist()))
                if key is not None:
                    out[b, i] = first.setdefault(key, i)
        return out
