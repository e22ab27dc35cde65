"""Request cache in the workdir: a rerun never pays twice for an answered request.

`requests.jsonl` holds one line per answered request: `{"key", "response"}`, where `key`
is the SHA-256 of the request's endpoint path and JSON body (sorted keys; no headers, so
no key). Each line is written and flushed as its answer arrives, so a run killed at any
point (Ctrl-C, SIGKILL, a crash) keeps every answer it received; a torn last line is
skipped on load. Only answers the run used are cached: a failed request is sent again.

On a workdir URI (gs://..., through `prd_jax.fileio`) an object cannot be appended to, so
answers go to numbered shards `requests.jsonl.0`, `.1`, ...: one new object per flush,
written at the end of a batch of requests once `flush_s` seconds have passed since the
last (and at `close`). A killed run loses at most the answers of that window; a rerun
reads every shard and numbers its own after them.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from typing import Optional

from prd_jax import fileio


def request_key(path: str, body: dict, tag: str = "") -> str:
    """Content key of a request: endpoint path + canonical JSON body, plus `tag` (the sample's
    seed, so k samples of one prompt stay k requests where the body carries no seed)."""
    text = json.dumps({"path": path, "body": body, "tag": tag}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


class RequestCache:
    """Answered requests by content key; `path=None` keeps them in memory only."""

    def __init__(self, path: Optional[str] = None, flush_s: float = 30.0):
        self.path, self._lock, self._answers = path, threading.Lock(), {}
        self.hits = 0
        self.uri = bool(path) and fileio.is_uri(path)
        self.flush_s, self._pending, self._last_flush, self._shard = flush_s, [], time.monotonic(), 0
        if path and not self.uri and os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                self._load(f.read())
        if self.uri:
            while fileio.exists(f"{path}.{self._shard}"):
                self._load(fileio.read_text(f"{path}.{self._shard}"))
                self._shard += 1
        self._file = open(path, "a", encoding="utf-8") if path and not self.uri else None

    def _load(self, text: str) -> None:
        for line in text.splitlines():
            try:
                row = json.loads(line)
                self._answers[row["key"]] = row["response"]
            except (ValueError, KeyError, TypeError):
                continue  # a torn line from a killed run

    def __len__(self) -> int:
        return len(self._answers)

    def get(self, key: str) -> Optional[dict]:
        with self._lock:
            hit = self._answers.get(key)
            self.hits += hit is not None
            return hit

    def put(self, key: str, response: dict) -> None:
        with self._lock:
            self._answers[key] = response
            line = json.dumps({"key": key, "response": response}) + "\n"
            if self._file is not None:
                self._file.write(line)
                self._file.flush()
            elif self.uri:
                self._pending.append(line)

    def flush(self, force: bool = False) -> None:
        """URI workdirs: write the pending answers as the next shard, when `flush_s` has
        passed since the last one (or `force`). Local files are flushed on every `put`."""
        with self._lock:
            if not self._pending or not (force or time.monotonic() - self._last_flush >= self.flush_s):
                return
            fileio.write_text(f"{self.path}.{self._shard}", "".join(self._pending))
            self._shard, self._pending, self._last_flush = self._shard + 1, [], time.monotonic()

    def close(self) -> None:
        self.flush(force=True)
        if self._file is not None:
            self._file.close()
            self._file = None
