"""Request cache in the workdir: a rerun never pays twice for an answered request.

`requests.jsonl` holds one line per answered request: `{"key", "response"}`, where `key`
is the SHA-256 of the request's endpoint path and JSON body (sorted keys; no headers, so
no key). Each line is written and flushed as its answer arrives, so a run killed at any
point (Ctrl-C, SIGKILL, a crash) keeps every answer it received; a torn last line is
skipped on load. Only answers the run used are cached: a failed request is sent again.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from typing import Optional


def request_key(path: str, body: dict, tag: str = "") -> str:
    """Content key of a request: endpoint path + canonical JSON body, plus `tag` (the sample's
    seed, so k samples of one prompt stay k requests where the body carries no seed)."""
    text = json.dumps({"path": path, "body": body, "tag": tag}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


class RequestCache:
    """Answered requests by content key; `path=None` keeps them in memory only."""

    def __init__(self, path: Optional[str] = None):
        self.path, self._lock, self._answers = path, threading.Lock(), {}
        self.hits = 0
        if path and os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                for line in f:
                    try:
                        row = json.loads(line)
                        self._answers[row["key"]] = row["response"]
                    except (ValueError, KeyError, TypeError):
                        continue  # a torn line from a killed run
        self._file = open(path, "a", encoding="utf-8") if path else None

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
            if self._file is not None:
                self._file.write(json.dumps({"key": key, "response": response}) + "\n")
                self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
