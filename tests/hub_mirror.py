"""A loopback stand-in for the Hugging Face Hub's file endpoint, for testing downloads with the real
`huggingface_hub` client (`HF_ENDPOINT` or `endpoint=` pointed at `HubMirror.url`).

It answers what `hf_hub_download` asks: HEAD and GET on `/datasets/{repo}/resolve/{revision}/{path}`,
with `X-Repo-Commit`, `ETag` (the sha256 of the bytes, as the Hub gives for LFS files) and
`Content-Length`; 404 with `X-Error-Code: RevisionNotFound` / `EntryNotFound` otherwise. A file
is served at its repo's commit and at "main". Every request is recorded as (method, path).

What it publishes, in each publisher's format at the catalog's repo, revision and file names:
`FIXTURES` (a few hand-written rows per benchmark), or, with `from_data_dir`, the rows of a
normalised data dir turned back into the publisher's files (`PUBLISHERS`: gsm8k, math500, aime2024,
aime2025, humaneval), so that `prd-jax data get` reproduces that data dir. `catalog_for` writes the
`--catalog` override file (sha256 and rows of what is served). Standalone, on 127.0.0.1 only:

    python tests/hub_mirror.py --port 0 --root M --write-catalog M/catalog.json --from-data-dir D gsm8k
    # prints its URL (first stdout line, once serving), then: HF_ENDPOINT=URL prd-jax data get gsm8k
    #   --dir X --catalog M/catalog.json   writes X/math/gsm8k_{train,test}.jsonl equal to D's
"""

from __future__ import annotations

import argparse
import hashlib
import http.server
import io
import json
import os
import sys
import threading
import urllib.parse

MAIN_COMMIT = "c0ffee" + "0" * 34  # what "main" resolves to for a repo whose catalog revision is a branch


def parquet(rows: list) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buf)
    return buf.getvalue()


def jsonl(rows: list) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()


# -- fixtures: a few rows per benchmark, in each publisher's format

GSM8K_TRAIN = [{"question": "Natalia sold 48 clips in April and half as many in May. How many in all?",
                "answer": "48/2 = <<48/2=24>>24\n48+24 = <<48+24=72>>72\n#### 72"},
               {"question": "A farm earns 1,000 a month for 13 months less 1,000.",
                "answer": "1000*13 - 1000 = 12000\n#### 12,000"}]
GSM8K_TEST = [{"question": "Janet's ducks lay 16 eggs. She eats 3 and bakes 4. Eggs sell for $2. Income?",
               "answer": "16-3-4 = 9\n9*2 = 18\n#### 18"}]
MATH500 = [{"problem": "Convert $(0,3)$ to polar.", "solution": "So $\\boxed{(3,\\frac{\\pi}{2})}$.",
            "answer": "\\left( 3, \\frac{\\pi}{2} \\right)", "subject": "Precalculus", "level": 2,
            "unique_id": "test/precalculus/807.json"}]
AIME2024 = [{"id": 60, "problem": "Find the minutes.", "solution": "It is 204.", "answer": "204",
             "url": "https://example.invalid/60", "year": "2024"},
            {"id": 67, "problem": "Find x.", "solution": "x = 25.", "answer": "025",
             "url": "https://example.invalid/67", "year": "2024"}]
AIME2025_I = [{"question": "Find the sum of all integer bases $b>9$ ...", "answer": "70"}]
AIME2025_II = [{"question": "Find the remainder ...", "answer": 117}]
HMMT = [{"problem_idx": i + 1, "problem": f"HMMT problem {i + 1}", "answer": f"\\frac{{{i + 1}}}{{2}}"}
        for i in range(30)]  # the real row count: the CLI test fetches it with the real catalog (unpinned)
HUMANEVAL = [{"task_id": "HumanEval/0", "prompt": "def add(a, b):\n    \"\"\"a + b\"\"\"\n",
              "canonical_solution": "    return a + b\n", "test": "def check(c):\n    assert c(1, 2) == 3\n",
              "entry_point": "add"}]


def lcb_row(qid: str, date: str) -> dict:
    return {"question_id": qid, "question_title": qid, "question_content": f"Print the sum ({qid}).",
            "platform": "atcoder", "contest_id": "abc", "contest_date": date, "starter_code": "",
            "difficulty": "easy", "public_test_cases": json.dumps([{"input": "1 2\n", "output": "3\n",
                                                                   "testtype": "stdin"}]),
            "private_test_cases": "", "metadata": "{}"}


LCB_FILES = ["test.jsonl"] + [f"test{i}.jsonl" for i in range(2, 7)]
LCB = {name: [lcb_row(f"q{k}", f"2024-0{k + 1}-01T00:00:00")] for k, name in enumerate(LCB_FILES)}
CC = {split: [{"name": f"1_{split}. Sum", "description": "Read a b, print a+b.",
               "public_tests": {"input": ["1 2\n"], "output": ["3\n"]},
               "private_tests": {"input": [], "output": []}, "generated_tests": {"input": [], "output": []},
               "time_limit": {"seconds": 2, "nanos": 0}, "memory_limit_bytes": 256 << 20, "difficulty": 7}]
      for split in ("test", "valid")}


def fixtures() -> dict:
    """{(repo, path in repo): bytes}: the fixture rows in each publisher's format and file names."""
    return {
        ("openai/gsm8k", "main/train-00000-of-00001.parquet"): parquet(GSM8K_TRAIN),
        ("openai/gsm8k", "main/test-00000-of-00001.parquet"): parquet(GSM8K_TEST),
        ("HuggingFaceH4/MATH-500", "test.jsonl"): jsonl(MATH500),
        ("HuggingFaceH4/aime_2024", "data/train-00000-of-00001.parquet"): parquet(AIME2024),
        ("opencompass/AIME2025", "aime2025-I.jsonl"): jsonl(AIME2025_I),
        ("opencompass/AIME2025", "aime2025-II.jsonl"): jsonl(AIME2025_II),
        ("MathArena/hmmt_feb_2025", "data/train-00000-of-00001.parquet"): parquet(HMMT),
        ("openai/openai_humaneval", "openai_humaneval/test-00000-of-00001.parquet"): parquet(HUMANEVAL),
        **{("livecodebench/code_generation_lite", name): jsonl(rows) for name, rows in LCB.items()},
        ("deepmind/code_contests", "data/test-00000-of-00001-9c49eeff30aacaa8.parquet"): parquet(CC["test"]),
        ("deepmind/code_contests", "data/valid-00000-of-00001-5e672c5751f060d3.parquet"): parquet(CC["valid"]),
    }


FIXTURES = fixtures()


# -- publishers: normalised rows of a data dir -> the publisher's files (inverse of data.download's converters)

def _rows(data_dir: str, rel: str) -> list:
    with open(os.path.join(data_dir, *rel.split("/")), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _gsm8k(bench, data_dir: str) -> dict:  # openai/gsm8k: question, answer (worked solution ending "#### N")
    return {s.files[0].path: parquet([{"question": r["problem"], "answer": r["solution"]}
                                      for r in _rows(data_dir, s.dest)]) for s in bench.splits}


def _math500(bench, data_dir: str) -> dict:
    s = bench.split("test")
    return {s.files[0].path: jsonl([{"problem": r["problem"], "solution": r["solution"], "answer": r["answer"],
                                     "subject": r["subject"], "level": r["level"], "unique_id": r["id"]}
                                    for r in _rows(data_dir, s.dest)])}


def _aime2024(bench, data_dir: str) -> dict:
    s = bench.split("test")
    return {s.files[0].path: parquet([{"id": int(r["id"].removeprefix("aime2024-")), "problem": r["problem"],
                                       "solution": r["solution"], "answer": r["answer"]}
                                      for r in _rows(data_dir, s.dest)])}


def _aime2025(bench, data_dir: str) -> dict:  # two files (I, II): the first half of the rows, then the rest
    s = bench.split("test")
    rows = [{"question": r["problem"], "answer": r["answer"]} for r in _rows(data_dir, s.dest)]
    half = (len(rows) + 1) // 2
    return {s.files[0].path: jsonl(rows[:half]), s.files[1].path: jsonl(rows[half:])}


def _humaneval(bench, data_dir: str) -> dict:
    s = bench.split("test")
    return {s.files[0].path: parquet(_rows(data_dir, s.dest))}


PUBLISHERS = {"gsm8k": _gsm8k, "math500": _math500, "aime2024": _aime2024, "aime2025": _aime2025,
              "humaneval": _humaneval}


def _file_rows(path: str, data: bytes) -> int:
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        return pq.read_metadata(io.BytesIO(data)).num_rows
    return sum(1 for line in data.splitlines() if line.strip())


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

    def publish(self, names, data_dir: str = None, benchmarks=None) -> dict:
        """Serve the benchmarks `names` (default: all that can be) at their catalog repo, file names
        and revision (a branch: `MAIN_COMMIT`): the fixtures, or with `data_dir` the publisher's files
        rebuilt from that normalised data dir (`PUBLISHERS`). Returns the `--catalog` override for
        them: {name: {repo, revision, sha256 of every file served, rows of every split served}}."""
        from prd_jax.data import catalog

        benchmarks = benchmarks or catalog.BENCHMARKS
        if data_dir is not None:
            names = list(names) or [n for n in PUBLISHERS
                                    if all(os.path.isfile(os.path.join(data_dir, *s.dest.split("/")))
                                           for s in catalog.benchmark(n, benchmarks).splits)]
            unknown = [n for n in names if n not in PUBLISHERS]
            if unknown:
                raise ValueError(f"--from-data-dir: benchmark={unknown[0]!r}; allowed: {list(PUBLISHERS)}")
        names = list(names) or [b.name for b in benchmarks]
        out = {}
        for name in names:
            b = catalog.benchmark(name, benchmarks)
            if data_dir is not None:
                files = PUBLISHERS[name](b, data_dir)
            else:
                files = {p: data for (repo, p), data in FIXTURES.items() if repo == b.repo}
            commit = b.revision if b.pinned else MAIN_COMMIT
            for path, data in files.items():
                self.add(b.repo, path, data, commit)
            out[name] = {"repo": b.repo, "revision": commit,
                         "sha256": {p: hashlib.sha256(d).hexdigest() for p, d in files.items()},
                         "rows": {s.name: sum(_file_rows(f.path, files[f.path]) for f in s.files)
                                  for s in b.splits if all(f.path in files for f in s.files)}}
        return out

    def write_files(self, root: str) -> None:
        """Write every served file to `<root>/datasets/<repo>/<path>` (what the mirror serves, to inspect)."""
        for (repo, path), data in self.files.items():
            dest = os.path.join(root, "datasets", *repo.split("/"), *path.split("/"))
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with open(dest, "wb") as f:
                f.write(data)

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

    def start(self, port: int = 0) -> str:
        """Listen on 127.0.0.1:`port` (0: any free port) in a daemon thread; returns the URL."""
        mirror = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_HEAD(self):  # noqa: N802
                mirror._answer(self, body=False)

            def do_GET(self):  # noqa: N802
                mirror._answer(self, body=True)

            def log_message(self, *args):
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
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


def main(argv=None) -> None:
    """`python tests/hub_mirror.py [--port P] [--root DIR] [--write-catalog FILE] [--from-data-dir D] [NAME...]`:
    serve NAME... (default: all it can) on 127.0.0.1 until interrupted; print the URL once serving."""
    parser = argparse.ArgumentParser(prog="tests/hub_mirror.py", description=main.__doc__)
    parser.add_argument("names", nargs="*", help="benchmarks (prd_jax.data.catalog), e.g. gsm8k")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free port)")
    parser.add_argument("--root", default=None, help="also write the served files under DIR/datasets/<repo>/")
    parser.add_argument("--write-catalog", default=None, metavar="FILE",
                        help="write the `prd-jax data get --catalog` file for what is served")
    parser.add_argument("--from-data-dir", default=None, metavar="D",
                        help=f"publish from a normalised data dir ({', '.join(PUBLISHERS)}), not the fixtures")
    args = parser.parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repo's prd_jax
    mirror = HubMirror()
    try:
        override = mirror.publish(args.names, args.from_data_dir)
    except (ValueError, OSError, KeyError) as e:
        parser.exit(2, f"tests/hub_mirror.py: error: {' '.join(str(e).split())}\n")
    if args.root:
        mirror.write_files(args.root)
    if args.write_catalog:
        os.makedirs(os.path.dirname(os.path.abspath(args.write_catalog)), exist_ok=True)
        tmp = args.write_catalog + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(json.dumps(override, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, args.write_catalog)
    url = mirror.start(args.port)
    summary = ", ".join(f"{n} ({', '.join(f'{s} {k}' for s, k in o['rows'].items())} rows)" for n, o in override.items())
    print(url, flush=True)
    print(f"serving {summary}" + (f"; catalog: {args.write_catalog}" if args.write_catalog else ""), flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        mirror.stop()


if __name__ == "__main__":
    main()
