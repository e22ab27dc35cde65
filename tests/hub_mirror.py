"""A loopback stand-in for the Hugging Face Hub's file endpoint, for testing downloads with the real
`huggingface_hub` client (`HF_ENDPOINT` or `endpoint=` pointed at `HubMirror.url`).

It answers what `hf_hub_download` asks: HEAD and GET on `/datasets/{repo}/resolve/{revision}/{path}`,
with `X-Repo-Commit`, `ETag` (the sha256 of the bytes, as the Hub gives for LFS files) and
`Content-Length`; 404 with `X-Error-Code: RevisionNotFound` / `EntryNotFound` otherwise. A file
is served at its repo's commit and at "main". Every request is recorded as (method, path).
"""

from __future__ import annotations

import hashlib
import http.server
import threading
import urllib.parse


class HubMirror:
    def __init__(self):
        self.files = {}  # (repo, path) -> bytes
        self.commits = {}  # repo -> 40-hex commit
        self.requests = []  # (method, url path)
        self._server = None

    def add(self, repo: str, path: str, data: bytes, commit: str) -> str:
        """Serve `data` as `path` of dataset `repo` at `commit` (and "main"); returns its sha256."""
        self.files[(repo, path)] = data
        self.commits[repo] = commit
        return hashlib.sha256(data).hexdigest()

    def _answer(self, handler, body: bool) -> None:
        self.requests.append((handler.command, handler.path))
        parts = urllib.parse.unquote(urllib.parse.urlsplit(handler.path).path).lstrip("/").split("/")
        if len(parts) < 6 or parts[0] != "datasets" or parts[3] != "resolve":
            return self._error(handler, 404, "RepoNotFound", None)
        repo, revision, path = "/".join(parts[1:3]), parts[4], "/".join(parts[5:])
        commit = self.commits.get(repo)
        if commit is None:
            return self._error(handler, 404, "RepoNotFound", None)
        if revision not in (commit, "main"):
            return self._error(handler, 404, "RevisionNotFound", None)
        data = self.files.get((repo, path))
        if data is None:
            return self._error(handler, 404, "EntryNotFound", commit)
        handler.send_response(200)
        handler.send_header("X-Repo-Commit", commit)
        handler.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
        handler.send_header("Content-Length", str(len(data)))
        handler.send_header("Content-Type", "application/octet-stream")
        handler.end_headers()
        if body:
            handler.wfile.write(data)

    @staticmethod
    def _error(handler, status: int, code: str, commit) -> None:
        message = f"{code}: {handler.path}".encode()
        handler.send_response(status)
        handler.send_header("X-Error-Code", code)
        handler.send_header("X-Error-Message", code)
        if commit:
            handler.send_header("X-Repo-Commit", commit)
        handler.send_header("Content-Length", str(len(message)))
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(message)

    def start(self) -> str:
        mirror = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_HEAD(self):  # noqa: N802
                mirror._answer(self, body=False)

            def do_GET(self):  # noqa: N802
                mirror._answer(self, body=True)

            def log_message(self, *args):
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self.url

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
