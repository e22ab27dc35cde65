"""Where each built-in benchmark comes from: Hub repo, revision, files, checksums, row counts,
licence, and the files under the data dir that its tasks read. Plain data; no imports beyond
the standard library (`prd-jax data list` and `tasks.require_data` read it without the Hub client).

A revision is *pinned* when it is a 40-hex commit; a file's checksum is pinned when `sha256` is
set. What is not pinned is fetched from the branch named and its checksum is recorded in the
data dir's manifest (`data.download`), never assumed. docs/data.md lists the sources of every
pinned value.

Layout written (the tasks' own patterns, `reads`):
- normalised JSONL (`convert` set): one file per split, e.g. `math/gsm8k_test.jsonl`, fields
  `id`, `problem`, `answer` (+ `solution`, ...) as `tasks.math` reads them; HumanEval's five
  published fields at `code/humaneval.jsonl`;
- publishers' files (`convert` None): each repo file at `<dest>/<its path in the repo>`, e.g.
  `code/codecontests/data/test-00000-of-00001-9c49eeff30aacaa8.parquet`.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import os
import re
from typing import Optional

__all__ = ["BENCHMARKS", "BUILT_IN", "OVERRIDE_KEYS", "Benchmark", "CatalogError", "File", "Override", "Split", "benchmark",
           "for_task", "load_override", "names"]

_COMMIT = re.compile(r"[0-9a-f]{40}")
BUILT_IN = "prd_jax/data/catalog.py"


@dataclasses.dataclass(frozen=True)
class File:
    """One published file: its path in the repo and, when known, the sha256 of its bytes."""

    path: str
    sha256: str = ""  # "" = not pinned (the manifest records what was fetched)


@dataclasses.dataclass(frozen=True)
class Split:
    """One split: the published files it is made of, the rows they hold at the pinned revision,
    where it lands (`dest`: a .jsonl file when converted, else a directory), and the globs under
    the data dir any of which, matching a file, means the split is present (`reads`)."""

    name: str
    files: tuple
    rows: int
    dest: str
    reads: tuple = ()

    @property
    def globs(self) -> tuple:
        return self.reads or (self.dest,)

    def present(self, root: str) -> bool:
        """Whether a file under the data dir `root` matches one of `globs`."""
        return any(os.path.isfile(f) for g in self.globs for f in glob.glob(os.path.join(root, *g.split("/"))))


@dataclasses.dataclass(frozen=True)
class Benchmark:
    """One built-in benchmark (see the module docstring). `convert` names a converter of
    `data.download` (None: the publisher's files are kept as published)."""

    name: str
    repo: str
    revision: str
    licence: str
    tasks: tuple
    splits: tuple
    convert: Optional[str] = None
    default_splits: tuple = ()  # () = every split
    note: str = ""
    source: str = BUILT_IN  # where repo, revision, sha256 and rows were set (BUILT_IN or a file)

    @property
    def pinned(self) -> bool:
        """The revision is a commit (not a branch)."""
        return bool(_COMMIT.fullmatch(self.revision))

    @property
    def split_names(self) -> tuple:
        return tuple(s.name for s in self.splits)

    def split(self, name: str) -> Split:
        for s in self.splits:
            if s.name == name:
                return s
        raise ValueError(f"benchmark {self.name!r}: split={name!r}; allowed: {list(self.split_names)}")

    def fetch_splits(self, requested=None) -> tuple:
        """The splits `data get` fetches: `requested` (validated), else `default_splits`, else all."""
        if requested:
            return tuple(self.split(n) for n in requested)
        return tuple(self.split(n) for n in (self.default_splits or self.split_names))


def _lcb_files() -> tuple:
    # sha256 of each release file at the pinned revision (docs/data.md: sources)
    sha = ("2bd02b38beb48e8c46b5b9987095d999ff38cd8efc255ea5d58974317c48f63f",
           "095df7c5daf15f882c51a9deb84085cff1e073495a5dbcf95015a564d485f3a3",
           "28ed26cc83363ce3f1fe2d5fad9f8393077beb1907b167a31bd3b32f80801b79",
           "d711138ddaebfcf5f8ec6a4283ee677298c0f5c5d374a235af92aaf0584510da",
           "7f77571c2a6df0c2a72a3277650309f67e01e0008e18117e624633df53f81214",
           "bb4c364f71921c4495a6ad15abe1a927350b720009f4933e2e71f8af0f6fd1f5")
    names = ["test.jsonl"] + [f"test{i}.jsonl" for i in range(2, 7)]
    return tuple(File(n, s) for n, s in zip(names, sha))


# train shard name suffixes at the pinned revision, in shard order (docs/data.md: sources)
_CC_TRAIN_SUFFIXES = (
    "e991a271dbfa9925", "e092fe56fda18715", "9cea23812e920e41", "e3822fccad6e083a", "cefe355b4667b27e",
    "b7580d2d846c2136", "65184bb9f7d61fde", "05785de21e8b8429", "7246e6b7423b404f", "b8c920f6629b57b2",
    "6de28ba20654f69b", "5de236be5188959d", "da9476a39a1bdbb7", "30b8c3829ee3b962", "dc3ebb07a3cba8e4",
    "19ccd7331d695677", "bf38b0908b322307", "ae5533a2f822e6ef", "8c793837880f5507", "d688fad5ee604390",
    "5d59387098675b73", "b257bf03d6876780", "1cfd39fa43c1917c", "d078bcb55e45cbf0", "f4e3da0e5661e6d1",
    "3f6ebfbaba5f4c70", "7d4898300894cbbe", "f8196766547533a2", "79a302af3c924863", "2b6615897d038115",
    "4135cc54050afc22", "40309dd907c042b7", "7b7d2068a3d9c359", "53b0f749aacff9c1", "a36ff0bff7d2a76f",
    "d28f9be60314601f", "146e1a11c054aeab", "995207c374a4e6f2", "96a59dd6a98cd075")
_CC_TRAIN_SHA = {0: "950bfdefde1f274edf93963e7e23c93ab16034de344aa7b7c32d14145e8d5232",
                 1: "7bcc72d98a3d97f07be90ea70bf8db834c8f29ac2c7626d7cfc657bae6f5ddd9",
                 2: "d67c9643019e632941b045f115c6bdf5925a4b32cd9f3fc991734970669b4a29",
                 3: "f4952386b2958bddb71ff6713b273b5425b1191084ef75923731b111bc20485f"}


def _cc_reads(split: str) -> tuple:
    """The patterns `tasks.codecontests` reads a split from."""
    return (f"code/codecontests/{split}-*", f"code/codecontests/data/{split}-*", f"code/codecontests/{split}.*")


BENCHMARKS = (
    Benchmark(
        "gsm8k", "openai/gsm8k", "740312add88f781978c0658806c59bc2815b9866", "MIT", ("gsm8k",),
        (Split("train", (File("main/train-00000-of-00001.parquet",
                              "ea82612ea9582142387730c793eb67d3b12849002bc0b7fa6f8efafa7351419d"),),
               7473, "math/gsm8k_train.jsonl"),
         Split("test", (File("main/test-00000-of-00001.parquet",
                             "ee7b8da9e381df27b9e3f7758a159ab2bdaa4dbaa910546cbbc47e0cb44e4f59"),),
               1319, "math/gsm8k_test.jsonl")),
        convert="gsm8k"),
    Benchmark(
        "math500", "HuggingFaceH4/MATH-500", "6e4ed1a2a79af7d8630a6b768ec859cb5af4d3be", "MIT", ("math500",),
        (Split("test", (File("test.jsonl", "35dc41080a3680858b27fa7e0533d2d547825316fc5dafe5d316f4ccc5a06132"),),
               500, "math/math500.jsonl"),),
        convert="math500"),
    Benchmark(
        "aime2024", "HuggingFaceH4/aime_2024", "2fe88a2f1091d5048c0f36abc874fb997b3dd99a",
        "not stated on the dataset card (AIME problems)", ("aime2024",),
        (Split("test", (File("data/train-00000-of-00001.parquet",
                             "26139847601a5037c237d5928b195e7260ca8074cf4f264b794af42847f79ccf"),),
               30, "math/aime2024.jsonl"),),
        convert="aime2024"),
    Benchmark(
        "aime2025", "opencompass/AIME2025", "a6ad95f611d72cf628a80b58bd0432ef6638f958",
        "not stated in the material we checked (AIME problems)", ("aime2025",),
        (Split("test", (File("aime2025-I.jsonl", "b91b3c96f05d9635d2a0692b124ebe023c1ff59cb19c074275e6c4b349d0659e"),
                        File("aime2025-II.jsonl", "16a2dcfbbf9db1b11f8a69a3ba5e4cac73e3641b19a37e2307e9c12240bbed5e")),
               30, "math/aime2025.jsonl"),),
        convert="aime2025"),
    Benchmark(
        "hmmt_feb2025", "MathArena/hmmt_feb_2025", "main", "CC-BY-NC-SA-4.0", ("hmmt_feb2025",),
        (Split("test", (File("data/train-00000-of-00001.parquet"),), 30, "math/hmmt_feb_2025",
               ("math/hmmt_feb2025.*", "math/hmmt_feb_2025/*", "math/hmmt_feb_2025/data/*")),),
        note="revision and checksum not pinned: no commit of this repo was found in the material checked"),
    Benchmark(
        "humaneval", "openai/openai_humaneval", "7dce6050a7d6d172f3cc5c32aa97f52fa1a2e544", "MIT", ("humaneval",),
        (Split("test", (File("openai_humaneval/test-00000-of-00001.parquet"),), 164, "code/humaneval.jsonl"),),
        convert="humaneval", note="checksum not pinned (the revision is)"),
    Benchmark(
        "livecodebench", "livecodebench/code_generation_lite", "0fe84c3912ea0c4d4a78037083943e8f0c4dd505",
        "CC (as the dataset card states it)",
        ("livecodebench", "livecodebench_v5", "livecodebench_v6", "livecodebench_release_v5", "livecodebench_release_v6"),
        (Split("test", _lcb_files(), 1055, "code/livecodebench", ("code/livecodebench/*",)),),
        note="about 4.5 GB (release_v1..v6 files)"),
    Benchmark(
        "codecontests", "deepmind/code_contests", "802411c3010cb00d1b05bad57ca77365a3c699d6", "CC-BY-4.0",
        ("codecontests",),
        (Split("test", (File("data/test-00000-of-00001-9c49eeff30aacaa8.parquet",
                             "aa426cbdb202bf8703b658bcb31fd1878ca7cfd33ca07d3b703dc94ca6a2b651"),),
               165, "code/codecontests", _cc_reads("test")),
         Split("valid", (File("data/valid-00000-of-00001-5e672c5751f060d3.parquet",
                              "02e8c1ccedae716f1e43cc813fcb7823c3db666ea92638820aba80e8cef451ab"),),
               117, "code/codecontests", _cc_reads("valid")),
         Split("train", tuple(File(f"data/train-{i:05d}-of-00039-{h}.parquet", _CC_TRAIN_SHA.get(i, ""))
                              for i, h in enumerate(_CC_TRAIN_SUFFIXES)),
               13328, "code/codecontests", _cc_reads("train"))),
        default_splits=("test", "valid"),
        note="train (39 shards, about 7.5 GB) only with --split train; 4 of its 39 checksums pinned"),
)


def names() -> list:
    return [b.name for b in BENCHMARKS]


def benchmark(name: str, benchmarks: tuple = BENCHMARKS) -> Benchmark:
    """The benchmark `name`; ValueError naming the allowed names otherwise."""
    for b in benchmarks:
        if b.name == name:
            return b
    raise ValueError(f"benchmark={name!r}; allowed: {[b.name for b in benchmarks]}")


def for_task(task_name: str, benchmarks: tuple = BENCHMARKS) -> Optional[Benchmark]:
    """The benchmark a task reads (None: not a built-in benchmark's task)."""
    for b in benchmarks:
        if task_name in b.tasks:
            return b
    return None


# -- overrides: `prd-jax data get | list --catalog FILE` (a private mirror, or a loopback test mirror)

OVERRIDE_KEYS = ("repo", "revision", "sha256", "rows")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")


class CatalogError(ValueError):
    """A catalog override file that cannot be used (one line: file, benchmark, key, what is allowed)."""


@dataclasses.dataclass(frozen=True)
class Override:
    """The catalog after a JSON override file: `benchmarks` (every benchmark; the overridden ones
    with `source` = the file), the file's `path` and `sha256`, and `keys`: {benchmark: keys set}."""

    benchmarks: tuple
    path: str
    sha256: str
    keys: dict

    def record(self, name: str) -> dict:
        """What the manifest records for benchmark `name` fetched under this override."""
        return {"path": self.path, "sha256": self.sha256, "keys": list(self.keys.get(name, ()))}


def _apply(b: Benchmark, spec: dict, where: str) -> Benchmark:
    """`b` with the keys of `spec` (validated) replaced; CatalogError naming the key otherwise."""
    if not isinstance(spec, dict):
        raise CatalogError(f"{where}: expected an object with keys among {list(OVERRIDE_KEYS)}, got {spec!r}")
    unknown = [k for k in spec if k not in OVERRIDE_KEYS]
    if unknown:
        raise CatalogError(f"{where}: key={unknown[0]!r}; allowed: {list(OVERRIDE_KEYS)}")
    change = {}
    if "repo" in spec:
        if not isinstance(spec["repo"], str) or not _REPO.fullmatch(spec["repo"]):
            raise CatalogError(f"{where}: repo={spec['repo']!r}; allowed: 'owner/name'")
        change["repo"] = spec["repo"]
    if "revision" in spec:
        if not isinstance(spec["revision"], str) or not spec["revision"].strip() or "/" in spec["revision"]:
            raise CatalogError(f"{where}: revision={spec['revision']!r}; allowed: a 40-hex commit or a branch name")
        change["revision"] = spec["revision"]
    paths = [f.path for s in b.splits for f in s.files]
    sha = spec.get("sha256", {})
    if not isinstance(sha, dict):
        raise CatalogError(f"{where}: sha256 must map file paths to sha256 hex digests, got {sha!r}")
    for path, digest in sha.items():
        if path not in paths:
            raise CatalogError(f"{where}: sha256 file={path!r}; allowed: {paths}")
        if not isinstance(digest, str) or not (digest == "" or _SHA256.fullmatch(digest)):
            raise CatalogError(f"{where}: sha256 of {path!r} = {digest!r}; allowed: 64 lowercase hex digits, "
                               f"or \"\" (not checked)")
    rows = spec.get("rows", {})
    if not isinstance(rows, dict):
        raise CatalogError(f"{where}: rows must map split names to row counts, got {rows!r}")
    for split, n in rows.items():
        if split not in b.split_names:
            raise CatalogError(f"{where}: rows split={split!r}; allowed: {list(b.split_names)}")
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise CatalogError(f"{where}: rows of {split!r} = {n!r}; allowed: an integer >= 0")
    splits = tuple(dataclasses.replace(
        s, rows=rows.get(s.name, s.rows),
        files=tuple(dataclasses.replace(f, sha256=sha.get(f.path, f.sha256)) for f in s.files)) for s in b.splits)
    return dataclasses.replace(b, splits=splits, **change)


def load_override(path: str, benchmarks: tuple = BENCHMARKS) -> Override:
    """Read the JSON override file `path`: {benchmark: {"repo": "owner/name", "revision": commit or
    branch, "sha256": {file path in the repo: hex digest}, "rows": {split: count}}}, each key optional,
    each inner map naming only what it changes. CatalogError (one line) when the file is missing, not
    JSON, or names a benchmark, key, file or split the catalog does not have."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise CatalogError(f"--catalog {path}: cannot read it ({e.strerror or type(e).__name__})") from e
    try:
        spec = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CatalogError(f"--catalog {path}: not JSON ({e})") from e
    allowed = [b.name for b in benchmarks]
    if not isinstance(spec, dict) or not spec:
        raise CatalogError(f"--catalog {path}: expected a non-empty object {{benchmark: overrides}} with "
                           f"benchmarks among {allowed}")
    unknown = [n for n in spec if n not in allowed]
    if unknown:
        raise CatalogError(f"--catalog {path}: benchmark={unknown[0]!r}; allowed: {allowed}")
    out = tuple(dataclasses.replace(_apply(b, spec[b.name], f"--catalog {path}: {b.name}"), source=path)
                if b.name in spec else b for b in benchmarks)
    return Override(out, os.path.abspath(path), hashlib.sha256(raw).hexdigest(),
                    {n: tuple(spec[n]) for n in spec})
