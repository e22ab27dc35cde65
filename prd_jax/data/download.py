"""`prd-jax data get | list`: fetch the built-in benchmarks from the Hugging Face Hub into the data
dir, in the layout the tasks read (`data.catalog`), and report what is there.

    prd-jax data get gsm8k math500           # or --all; --dir D (default: data.paths.data_dir's choice)
    prd-jax data get codecontests --split train
    prd-jax data list [--dir D] [--json]
    HF_ENDPOINT=https://mirror.example prd-jax data get gsm8k --catalog my_mirror.json


Each file is fetched with `huggingface_hub.hf_hub_download` at the catalog's revision (the endpoint
is `HF_ENDPOINT`, or `endpoint=`), into `<data dir>/.prd_download/`; its sha256 is checked against
the catalog where pinned; publishers' formats are converted to the normalised JSONL where the
tasks read JSONL; row counts are checked against the catalog. Only when every file and count of
a benchmark checks out are its outputs moved into place (temp file + rename each), so a failed or
interrupted download leaves what was there. `<data dir>/.prd_manifest.json` records, per
benchmark, the repo, revision and commit fetched, each file's sha256 and size, each output's rows
and the time.

`--catalog FILE` (`catalog.load_override`) replaces, for the benchmarks the JSON file names, their
repo, revision, pinned sha256s or row counts (a private mirror's); the manifest then records the
file's path and sha256 under `catalog_override`, and a checksum refusal names the file.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
import shutil
from typing import Callable, Optional, Sequence

from huggingface_hub import get_hf_file_metadata, hf_hub_download, hf_hub_url

from prd_jax.data import catalog, paths
from prd_jax.tasks.rows import read_records

__all__ = ["CONVERTERS", "DataError", "MANIFEST", "get", "list_rows", "format_list", "read_manifest", "main"]

log = logging.getLogger(__name__)

MANIFEST = ".prd_manifest.json"
STAGING = ".prd_download"


class DataError(ValueError):
    """A benchmark could not be fetched or failed verification (one line: file, expected, got)."""


# -- converters: publisher records (all files of a split, in file order) -> normalised rows

def _gsm8k(records: list, split: str) -> list:
    """GSM8K `question` / `answer` (worked solution ending in `#### N`) -> id, problem, answer
    (N without thousands separators), solution (the published answer text)."""
    out = []
    for i, r in enumerate(records):
        solution = str(r["answer"])
        if "####" not in solution:
            raise DataError(f"gsm8k {split} record {i}: its answer has no '#### N' line")
        final = solution.rsplit("####", 1)[1].strip().replace(",", "")
        out.append({"id": f"gsm8k-{split}-{i}", "problem": str(r["question"]), "answer": final, "solution": solution})
    return out


def _math500(records: list, split: str) -> list:
    return [{"id": str(r["unique_id"]), "problem": str(r["problem"]), "answer": str(r["answer"]),
             "solution": str(r["solution"]), "subject": r["subject"], "level": r["level"]} for r in records]


def _aime2024(records: list, split: str) -> list:
    return [{"id": f"aime2024-{r['id']}", "problem": str(r["problem"]), "answer": str(r["answer"]),
             "solution": str(r["solution"])} for r in records]


def _aime2025(records: list, split: str) -> list:
    return [{"id": f"aime2025-{i}", "problem": str(r["question"]), "answer": str(r["answer"])}
            for i, r in enumerate(records)]


def _humaneval(records: list, split: str) -> list:
    return [{k: r[k] for k in ("task_id", "prompt", "canonical_solution", "test", "entry_point")} for r in records]


CONVERTERS: dict = {"gsm8k": _gsm8k, "math500": _math500, "aime2024": _aime2024, "aime2025": _aime2025,
                    "humaneval": _humaneval}


# -- files

def sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def count_rows(path: str) -> int:
    """Records in a published file: parquet metadata rows, or non-empty JSONL lines."""
    if path.endswith(".parquet"):
        import pyarrow.parquet as parquet

        return parquet.read_metadata(path).num_rows
    with open(path, "rb") as f:
        return sum(1 for line in f if line.strip())


def _write_atomic(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def read_manifest(root: str) -> dict:
    """{benchmark name: entry} from `<root>/.prd_manifest.json` ({} when absent)."""
    path = os.path.join(root, MANIFEST)
    if not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _fetch(bench: catalog.Benchmark, file: catalog.File, staging: str, endpoint: Optional[str]) -> tuple:
    """(local path, commit) of one published file, fetched by huggingface_hub; DataError naming
    the repo, revision and file when the Hub (or mirror) does not serve it."""
    where = f"{bench.repo}@{bench.revision}:{file.path}"
    try:
        local = hf_hub_download(bench.repo, file.path, repo_type="dataset", revision=bench.revision,
                                local_dir=staging, endpoint=endpoint)
        commit = bench.revision
        if not bench.pinned:  # record which commit the branch pointed at
            url = hf_hub_url(bench.repo, file.path, repo_type="dataset", revision=bench.revision, endpoint=endpoint)
            commit = get_hf_file_metadata(url, endpoint=endpoint).commit_hash or bench.revision
    except Exception as e:  # the library's errors (offline, 404, HTTP) become one line
        detail = " ".join(str(e).split())[:300]
        raise DataError(f"{bench.name}: cannot fetch {where} from {endpoint or 'the Hub (HF_ENDPOINT)'}: "
                        f"{type(e).__name__}: {detail}") from e
    return local, commit


def _check_sha(bench, file, local: str) -> str:
    got = sha256_file(local)
    if file.sha256 and got != file.sha256:
        os.remove(local)  # never keep bytes that failed verification
        raise DataError(f"{bench.name}: {bench.repo}@{bench.revision}:{file.path} has sha256 {got}; "
                        f"expected {file.sha256} (pinned in {bench.source}); refusing it")
    return got


def _get_one(bench: catalog.Benchmark, root: str, splits: Sequence[str], endpoint: Optional[str],
             say: Callable[[str], None]) -> dict:
    staging = os.path.join(root, STAGING, bench.name)
    files, outputs, commits, moves = [], {}, set(), []
    for split in bench.fetch_splits(splits):
        local_paths = []
        for file in split.files:
            local, commit = _fetch(bench, file, staging, endpoint)
            digest = _check_sha(bench, file, local)
            files.append({"path": file.path, "sha256": digest, "bytes": os.path.getsize(local),
                          "sha256_pinned": bool(file.sha256)})
            commits.add(commit)
            local_paths.append(local)
        if bench.convert:
            rows = CONVERTERS[bench.convert]([r for p in local_paths for r in read_records(p)], split.name)
            n = len(rows)
            text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
            moves.append(("text", text, os.path.join(root, *split.dest.split("/"))))
        else:
            n = sum(count_rows(p) for p in local_paths)
            for file, local in zip(split.files, local_paths):
                moves.append(("file", local, os.path.join(root, *split.dest.split("/"), *file.path.split("/"))))
        if n != split.rows:
            raise DataError(f"{bench.name} {split.name}: {n} rows after download, expected {split.rows} at "
                            f"{bench.repo}@{bench.revision}; nothing was written")
        outputs[split.name] = {"dest": split.dest, "rows": n}
    for kind, payload, dest in moves:  # every check passed: move into place, one atomic rename each
        if kind == "text":
            _write_atomic(dest, payload)
        else:
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            os.replace(payload, dest)
    shutil.rmtree(staging, ignore_errors=True)
    counts = ", ".join(f"{name} {out['rows']} rows" for name, out in outputs.items())
    via = "" if bench.source == catalog.BUILT_IN else f" [catalog: {bench.source}]"
    say(f"{bench.name}: {counts} ({bench.repo}@{bench.revision[:12]}) -> {root}{via}")
    return {"repo": bench.repo, "revision": bench.revision, "revision_pinned": bench.pinned,
            "commit": sorted(commits)[0] if len(commits) == 1 else sorted(commits), "files": files,
            "outputs": outputs, "endpoint": endpoint or os.environ.get("HF_ENDPOINT", "https://huggingface.co"),
            "fetched_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}


def get(names: Sequence[str], data_dir: Optional[str] = None, *, splits: Sequence[str] = (),
        endpoint: Optional[str] = None, benchmarks: tuple = catalog.BENCHMARKS,
        catalog_file: Optional[str] = None, say: Callable[[str], None] = print) -> dict:
    """Fetch, verify and write the benchmarks `names` (see the module docstring) into `data_dir`
    (`paths.resolve_data_dir`; created when missing). `splits` narrows each benchmark's splits
    (default: its `default_splits`); `catalog_file` overrides `benchmarks` (`catalog.load_override`).
    Returns {name: manifest entry}. DataError (CatalogError for the file) on any failure."""
    override = catalog.load_override(catalog_file, benchmarks) if catalog_file else None
    if override:
        benchmarks = override.benchmarks
    if not names:
        raise DataError(f"no benchmark named; give one or more of {[b.name for b in benchmarks]} or --all")
    chosen = [catalog.benchmark(n, benchmarks) for n in dict.fromkeys(names)]
    for b in chosen:
        b.fetch_splits(splits)  # unknown split: fail before any download
    root, _ = paths.resolve_data_dir(data_dir)
    os.makedirs(root, exist_ok=True)
    done = {}
    for b in chosen:
        done[b.name] = _get_one(b, root, splits, endpoint, say)
        if override:
            done[b.name]["catalog_override"] = override.record(b.name)
        manifest = read_manifest(root)
        old = manifest.get(b.name, {})
        if old.get("revision") == b.revision:  # keep other splits fetched earlier at this revision
            done[b.name]["outputs"] = {**old.get("outputs", {}), **done[b.name]["outputs"]}
            kept = {f["path"]: f for f in old.get("files", [])}
            kept.update({f["path"]: f for f in done[b.name]["files"]})
            done[b.name]["files"] = list(kept.values())
        manifest[b.name] = done[b.name]
        _write_atomic(os.path.join(root, MANIFEST), json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    try:
        os.rmdir(os.path.join(root, STAGING))  # only when no failed download left files there
    except OSError:
        pass
    return done


def list_rows(data_dir: Optional[str] = None, benchmarks: tuple = catalog.BENCHMARKS,
              catalog_file: Optional[str] = None) -> list:
    """One record per benchmark for `data list`: source, revision (pinned or not), rows per split,
    licence, the splits present under the data dir, what the manifest says was fetched, and where
    its catalog values come from (`catalog`: the built-in table or the `catalog_file` override)."""
    if catalog_file:
        benchmarks = catalog.load_override(catalog_file, benchmarks).benchmarks
    root, source = paths.resolve_data_dir(data_dir)
    manifest = read_manifest(root) if os.path.isdir(root) else {}
    out = []
    for b in benchmarks:
        present = [s.name for s in b.splits if s.present(root)]
        entry = manifest.get(b.name)
        out.append({"benchmark": b.name, "repo": b.repo, "revision": b.revision, "revision_pinned": b.pinned,
                    "sha256_pinned": sum(bool(f.sha256) for s in b.splits for f in s.files),
                    "files": sum(len(s.files) for s in b.splits), "rows": {s.name: s.rows for s in b.splits},
                    "licence": b.licence, "present": present, "tasks": list(b.tasks),
                    "fetched": (entry or {}).get("fetched_at"), "commit": (entry or {}).get("commit"),
                    "catalog": b.source, "data_dir": root, "data_dir_from": source})
    return out


def format_list(records: list) -> str:
    """`data list` as text: one block line per benchmark, then the data dir."""
    lines = []
    for r in records:
        rev = r["revision"][:12] + ("" if r["revision_pinned"] else " (not pinned)")
        rows = ", ".join(f"{s} {n}" for s, n in r["rows"].items())
        if len(r["present"]) == len(r["rows"]):
            present = "present"
        elif r["present"]:
            present = "partial: " + ",".join(r["present"])
        else:
            present = "absent"
        fetched = f"fetched {r['fetched']}" if r["fetched"] else ("not from `data get`" if r["present"] else "")
        lines.append(f"{r['benchmark']:<14} {present:<16} {r['repo']}@{rev}  rows: {rows}  "
                     f"sha256 pinned {r['sha256_pinned']}/{r['files']}  licence: {r['licence']}"
                     + (f"  [{fetched}]" if fetched else ""))
    overridden = {r["benchmark"]: r["catalog"] for r in records if r.get("catalog", catalog.BUILT_IN) != catalog.BUILT_IN}
    if overridden:
        lines.append(f"catalog: {', '.join(overridden)} from {next(iter(overridden.values()))}; the rest built in")
    if records:
        lines.append(f"data dir: {records[0]['data_dir']} (from {records[0]['data_dir_from']})")
    return "\n".join(lines)


def main(args) -> None:
    """`prd-jax data ACTION` (cli.py builds the parser)."""
    if args.data_action == "list":
        records = list_rows(args.dir, catalog_file=getattr(args, "catalog", None))
        print(json.dumps(records) if args.json else format_list(records))
        return
    names = catalog.names() if args.all else list(args.names)
    if args.all and args.names:
        raise DataError("give benchmark names or --all, not both")
    get(names, args.dir, splits=args.split or (), catalog_file=getattr(args, "catalog", None))
