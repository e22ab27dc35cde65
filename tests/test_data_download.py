"""`prd-jax data get | list` against a loopback Hub mirror (tests/hub_mirror.py), through the real
`huggingface_hub` client: fixture rows in each publisher's format (parquet written here with
pyarrow, JSONL) are fetched, verified, converted, and must equal hand-written rows; a wrong
checksum or row count is refused and writes nothing; `data list` and `tasks.require_data` see what
is there; an eval on a missing benchmark stops before any model loads.

Fixture files are not the real ones, so the fixture catalog is the real catalog (repos, revisions,
file names, converters, destinations) with the fixtures' sha256 and row counts. `--catalog FILE`
does the same from the command line: the standalone mirror (`python tests/hub_mirror.py`) writes
that file, here from the shared normalised data, and `prd-jax data get gsm8k` must reproduce it.
"""

import dataclasses
import hashlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from hub_mirror import FIXTURES, GSM8K_TEST, GSM8K_TRAIN, HUMANEVAL, MAIN_COMMIT, HubMirror
from prd_jax.data import catalog, download
from prd_jax.tasks import get_task, require_data

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED = REPO_ROOT.parent / "shared" / "data"


# what the download must write: hand-written, in the layout tasks.math / tasks.humaneval read
EXPECTED = {
    "math/gsm8k_train.jsonl": [
        {"id": "gsm8k-train-0", "problem": GSM8K_TRAIN[0]["question"], "answer": "72",
         "solution": GSM8K_TRAIN[0]["answer"]},
        {"id": "gsm8k-train-1", "problem": GSM8K_TRAIN[1]["question"], "answer": "12000",
         "solution": GSM8K_TRAIN[1]["answer"]}],
    "math/gsm8k_test.jsonl": [
        {"id": "gsm8k-test-0", "problem": GSM8K_TEST[0]["question"], "answer": "18",
         "solution": GSM8K_TEST[0]["answer"]}],
    "math/math500.jsonl": [
        {"id": "test/precalculus/807.json", "problem": "Convert $(0,3)$ to polar.",
         "answer": "\\left( 3, \\frac{\\pi}{2} \\right)", "solution": "So $\\boxed{(3,\\frac{\\pi}{2})}$.",
         "subject": "Precalculus", "level": 2}],
    "math/aime2024.jsonl": [
        {"id": "aime2024-60", "problem": "Find the minutes.", "answer": "204", "solution": "It is 204."},
        {"id": "aime2024-67", "problem": "Find x.", "answer": "025", "solution": "x = 25."}],
    "math/aime2025.jsonl": [
        {"id": "aime2025-0", "problem": "Find the sum of all integer bases $b>9$ ...", "answer": "70"},
        {"id": "aime2025-1", "problem": "Find the remainder ...", "answer": "117"}],
    "code/humaneval.jsonl": HUMANEVAL,
}


def fixture_catalog(**replace_rows) -> tuple:
    """The real catalog, with the fixtures' sha256 where the real one is pinned and their row counts."""
    out = []
    for b in catalog.BENCHMARKS:
        splits = []
        for s in b.splits:
            files = tuple(dataclasses.replace(f, sha256=hashlib.sha256(FIXTURES[(b.repo, f.path)]).hexdigest())
                          if f.sha256 and (b.repo, f.path) in FIXTURES else f for f in s.files)
            rows = sum(pq.read_metadata(io.BytesIO(FIXTURES[(b.repo, f.path)])).num_rows
                       if f.path.endswith(".parquet") else FIXTURES[(b.repo, f.path)].count(b"\n")
                       for f in s.files if (b.repo, f.path) in FIXTURES)
            splits.append(dataclasses.replace(s, files=files, rows=replace_rows.get(b.name, rows)))
        out.append(dataclasses.replace(b, splits=tuple(splits)))
    return tuple(out)


@pytest.fixture(scope="module")
def mirror():
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ["NO_PROXY"] = ",".join(filter(None, [os.environ.get("NO_PROXY"), "127.0.0.1", "localhost"]))
    with HubMirror() as m:
        for (repo, path), data in FIXTURES.items():
            bench = next(b for b in catalog.BENCHMARKS if b.repo == repo)
            m.add(repo, path, data, bench.revision if bench.pinned else MAIN_COMMIT)
        yield m


@pytest.fixture(scope="module")
def fetched(mirror, tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    said = []
    entries = download.get(catalog.names(), str(root), endpoint=mirror.url, benchmarks=fixture_catalog(),
                           say=said.append)
    return root, entries, said


def read_jsonl(path: Path) -> list:
    with open(path, encoding="utf-8") as f:  # lines end at "\n" only: GSM8K's text holds U+2028, which
        return [json.loads(line) for line in f]  # str.splitlines() would also split at


def test_get_writes_the_rows_the_tasks_read(fetched, mirror):
    root, entries, said = fetched
    for rel, rows in EXPECTED.items():
        assert read_jsonl(root / rel) == rows, rel
    if SHARED.is_dir():  # same fields as the shared copy of the real data
        for rel in ("math/gsm8k_test.jsonl", "math/math500.jsonl", "math/aime2024.jsonl", "math/aime2025.jsonl"):
            assert list(read_jsonl(root / rel)[0]) == list(json.loads(open(SHARED / rel).readline()))
    # publishers' files are kept byte for byte where the tasks read them
    assert (root / "math/hmmt_feb_2025/data/train-00000-of-00001.parquet").read_bytes() == \
        FIXTURES[("MathArena/hmmt_feb_2025", "data/train-00000-of-00001.parquet")]
    hmmt = get_task("hmmt_feb2025").problems(data_dir=str(root))
    assert [(r["id"], r["answer"]) for r in hmmt[:2]] == [("1", "\\frac{1}{2}"), ("2", "\\frac{2}{2}")]
    assert len(hmmt) == 30
    assert [r["id"] for r in get_task("livecodebench").problems(data_dir=str(root))] == [f"q{k}" for k in range(6)]
    for split in ("test", "valid"):
        assert [r["id"] for r in get_task("codecontests").problems(split, data_dir=str(root))] == [f"1_{split}. Sum"]
    assert not (root / ".prd_download").exists()
    # every file came through HEAD + GET at the catalog's revision
    for b in catalog.BENCHMARKS:
        for s in b.fetch_splits():
            for f in s.files:
                url = f"/datasets/{b.repo}/resolve/{b.revision}/{f.path}"
                assert ("HEAD", url) in mirror.requests and ("GET", url) in mirror.requests, url
    assert len(said) == 8 and said[0].startswith("gsm8k: train 2 rows, test 1 rows")


def test_manifest_records_what_was_fetched(fetched):
    root, entries, _ = fetched
    manifest = json.loads((root / download.MANIFEST).read_text())
    assert sorted(manifest) == sorted(catalog.names())
    gsm = manifest["gsm8k"]
    assert gsm["revision"] == gsm["commit"] == "740312add88f781978c0658806c59bc2815b9866"
    assert gsm["outputs"] == {"train": {"dest": "math/gsm8k_train.jsonl", "rows": 2},
                              "test": {"dest": "math/gsm8k_test.jsonl", "rows": 1}}
    data = FIXTURES[("openai/gsm8k", "main/test-00000-of-00001.parquet")]
    assert {"path": "main/test-00000-of-00001.parquet", "sha256": hashlib.sha256(data).hexdigest(),
            "bytes": len(data), "sha256_pinned": True} in gsm["files"]
    hmmt = manifest["hmmt_feb2025"]
    assert (hmmt["revision"], hmmt["revision_pinned"], hmmt["commit"]) == ("main", False, MAIN_COMMIT)
    assert hmmt["files"][0]["sha256_pinned"] is False
    assert manifest["codecontests"]["outputs"] == {"test": {"dest": "code/codecontests", "rows": 1},
                                                   "valid": {"dest": "code/codecontests", "rows": 1}}


def test_checksum_mismatch_is_refused_and_writes_nothing(mirror, tmp_path):
    bad = tuple(dataclasses.replace(b, splits=tuple(dataclasses.replace(
        s, files=tuple(dataclasses.replace(f, sha256="0" * 64) for f in s.files)) if s.name == "test" else s
        for s in b.splits)) if b.name == "gsm8k" else b for b in fixture_catalog())
    with pytest.raises(download.DataError, match="main/test-00000-of-00001.parquet has sha256 [0-9a-f]{64}; "
                                                 "expected 0{64}"):
        download.get(["gsm8k"], str(tmp_path), endpoint=mirror.url, benchmarks=bad, say=lambda s: None)
    assert not (tmp_path / "math").exists() and not (tmp_path / download.MANIFEST).exists()
    staged = sorted(p.name for p in (tmp_path / ".prd_download").rglob("*.parquet"))
    assert staged == ["train-00000-of-00001.parquet"]  # verified bytes stay for a rerun; the refused ones are gone


def test_row_count_mismatch_is_an_error(mirror, tmp_path):
    with pytest.raises(download.DataError, match=r"math500 test: 1 rows after download, expected 500"):
        download.get(["math500"], str(tmp_path), endpoint=mirror.url, benchmarks=fixture_catalog(math500=500),
                     say=lambda s: None)
    assert not (tmp_path / "math" / "math500.jsonl").exists()


def test_unknown_names_and_missing_files_are_one_line_errors(mirror, tmp_path):
    with pytest.raises(ValueError, match=r"benchmark='gsm9k'; allowed: \['gsm8k'"):
        download.get(["gsm9k"], str(tmp_path), endpoint=mirror.url)
    with pytest.raises(ValueError, match=r"split='dev'; allowed: \['test', 'valid', 'train'\]"):
        download.get(["codecontests"], str(tmp_path), splits=["dev"], endpoint=mirror.url)
    with pytest.raises(download.DataError, match=r"cannot fetch deepmind/code_contests@802411c3010c.*"
                                                 r"train-00000-of-00039-e991a271dbfa9925.parquet.*EntryNotFound"):
        download.get(["codecontests"], str(tmp_path), splits=["train"], endpoint=mirror.url,
                     benchmarks=fixture_catalog(), say=lambda s: None)


def test_list_reports_present_and_absent(mirror, tmp_path):
    assert all(r["present"] == [] for r in download.list_rows(str(tmp_path)))
    download.get(["gsm8k", "hmmt_feb2025"], str(tmp_path), endpoint=mirror.url, benchmarks=fixture_catalog(),
                 say=lambda s: None)
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "humaneval.jsonl").write_text(json.dumps(HUMANEVAL[0]) + "\n")  # placed by hand
    rows = {r["benchmark"]: r for r in download.list_rows(str(tmp_path))}
    assert rows["gsm8k"]["present"] == ["train", "test"] and rows["gsm8k"]["fetched"]
    assert rows["hmmt_feb2025"]["present"] == ["test"] and not rows["hmmt_feb2025"]["revision_pinned"]
    assert rows["humaneval"]["present"] == ["test"] and rows["humaneval"]["fetched"] is None
    assert [n for n, r in rows.items() if not r["present"]] == ["math500", "aime2024", "aime2025", "livecodebench",
                                                                "codecontests"]
    assert rows["codecontests"]["rows"] == {"test": 165, "valid": 117, "train": 13328}
    assert (rows["livecodebench"]["sha256_pinned"], rows["livecodebench"]["files"]) == (6, 6)
    text = download.format_list(list(rows.values())).splitlines()
    assert text[0].startswith("gsm8k          present          openai/gsm8k@740312add88f  rows: train 7473, test 1319")
    assert "MathArena/hmmt_feb_2025@main (not pinned)" in text[4]
    assert text[5].startswith("humaneval      present") and "[not from `data get`]" in text[5]
    assert text[6].startswith("livecodebench  absent ")
    assert text[-1] == f"data dir: {tmp_path} (from the data_dir argument)"


def test_require_data_names_the_command(mirror, tmp_path):
    empty = str(tmp_path / "empty")
    with pytest.raises(FileNotFoundError) as err:
        require_data("gsm8k", "test", empty)
    message = str(err.value)
    assert "\n" not in message and message.endswith("run `prd-jax data get gsm8k`")
    assert "math/gsm8k_test.jsonl" in message
    with pytest.raises(FileNotFoundError, match=r"run `prd-jax data get codecontests --split train`"):
        require_data("codecontests", "train", empty)
    with pytest.raises(FileNotFoundError, match=r"run `prd-jax data get livecodebench`"):
        require_data("livecodebench_v6", None, empty)
    require_data("modchain", "train", empty)  # synthetic: nothing to fetch
    download.get(["gsm8k", "hmmt_feb2025"], empty, endpoint=mirror.url, benchmarks=fixture_catalog(),
                 say=lambda s: None)
    require_data("gsm8k", "test", empty)
    require_data("hmmt_feb2025", "train", empty)  # the one published split, under either name


def test_eval_on_missing_data_stops_before_the_model_loads(tmp_path, monkeypatch):
    from prd_jax import eval_setup, evaluate as ev
    from prd_jax.config_io import load_config

    def no_model(*a, **k):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(eval_setup, "load", no_model)
    config = load_config(str(REPO_ROOT / "configs" / "eval" / "smollm2_gsm8k.py"))
    config.data_dir = str(tmp_path / "empty")
    with pytest.raises(FileNotFoundError, match=r"task 'gsm8k' split 'test'.*run `prd-jax data get gsm8k`$"):
        ev.evaluate(config, str(tmp_path / "work"), progress=False)
    assert not (tmp_path / "work").exists()


def test_train_setup_on_missing_data_stops_before_params_load(tmp_path, monkeypatch):
    from prd_jax.config_io import load_config
    from prd_jax.train import setup

    def no_params(*a, **k):
        raise AssertionError("params were loaded")

    monkeypatch.setattr(setup, "load", no_params)
    config = load_config(str(REPO_ROOT / "configs" / "rl" / "tiny.py"))
    config.task = "gsm8k"
    config.model.init = "pretrained"
    config.data_dir = str(tmp_path / "empty")
    with pytest.raises(FileNotFoundError, match=r"task 'gsm8k' split 'train'.*run `prd-jax data get gsm8k`"):
        setup.build_model(config, None)


def _cli(args: list, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "prd_jax.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **env}, cwd=REPO_ROOT, timeout=120)


def test_cli_data_get_and_list(mirror, tmp_path):
    env = {"HF_ENDPOINT": mirror.url, "PRD_DATA_DIR": str(tmp_path), "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    done = _cli(["data", "get", "hmmt_feb2025"], env)  # unpinned upstream: the mirror's 30 rows pass
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"hmmt_feb2025: test 30 rows (MathArena/hmmt_feb_2025@main) -> {tmp_path}")
    refused = _cli(["data", "get", "gsm8k"], env)  # pinned upstream: the fixture's bytes are not the real ones
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1 and refused.stderr.startswith("prd-jax data: error: gsm8k: openai/gsm8k@")
    assert "expected ea82612ea9582142387730c793eb67d3b12849002bc0b7fa6f8efafa7351419d" in refused.stderr
    listed = _cli(["data", "list", "--json"], env)
    rows = {r["benchmark"]: r["present"] for r in json.loads(listed.stdout)}
    assert rows == {"gsm8k": [], "math500": [], "aime2024": [], "aime2025": [], "hmmt_feb2025": ["test"],
                    "humaneval": [], "livecodebench": [], "codecontests": []}
    usage = _cli(["data", "get"], env)
    assert usage.returncode == 2 and "prd-jax data: error: no benchmark named" in usage.stderr


# -- --catalog FILE: a private mirror's repo, revision, checksums and row counts

def _write(path: Path, spec) -> str:
    path.write_text(spec if isinstance(spec, str) else json.dumps(spec))
    return str(path)


def _gsm8k_override(**extra) -> dict:
    return {"gsm8k": {"sha256": {f"main/{s}-00000-of-00001.parquet": hashlib.sha256(
        FIXTURES[("openai/gsm8k", f"main/{s}-00000-of-00001.parquet")]).hexdigest() for s in ("train", "test")},
        "rows": {"train": 2, "test": 1}, **extra}}


def test_catalog_override_is_used_and_recorded(mirror, tmp_path):
    spec = _gsm8k_override()
    file = _write(tmp_path / "mirror.json", spec)
    said = []
    entries = download.get(["gsm8k"], str(tmp_path / "data"), endpoint=mirror.url, catalog_file=file,
                           say=said.append)  # the built-in catalog refuses these bytes (test_cli_data_get_and_list)
    assert read_jsonl(tmp_path / "data/math/gsm8k_test.jsonl") == EXPECTED["math/gsm8k_test.jsonl"]
    assert said == [f"gsm8k: train 2 rows, test 1 rows (openai/gsm8k@740312add88f) -> {tmp_path / 'data'} "
                    f"[catalog: {file}]"]
    manifest = json.loads((tmp_path / "data" / download.MANIFEST).read_text())
    record = {"path": file, "sha256": hashlib.sha256((tmp_path / "mirror.json").read_bytes()).hexdigest(),
              "keys": ["sha256", "rows"]}
    assert manifest["gsm8k"]["catalog_override"] == entries["gsm8k"]["catalog_override"] == record
    assert all(f["sha256_pinned"] for f in manifest["gsm8k"]["files"])
    # only the keys named change: a wrong override checksum is refused and names the file
    spec["gsm8k"]["sha256"]["main/test-00000-of-00001.parquet"] = "1" * 64
    bad = _write(tmp_path / "bad.json", spec)
    with pytest.raises(download.DataError, match=rf"expected 1{{64}} \(pinned in {re.escape(bad)}\); refusing it"):
        download.get(["gsm8k"], str(tmp_path / "other"), endpoint=mirror.url, catalog_file=bad, say=lambda s: None)
    # repo and revision: the mirror serves gsm8k under another name, on a branch
    with HubMirror() as private:
        private.add("acme/gsm8k-copy", "main/train-00000-of-00001.parquet",
                    FIXTURES[("openai/gsm8k", "main/train-00000-of-00001.parquet")], "ab" * 20)
        moved = _write(tmp_path / "moved.json", {"gsm8k": {**_gsm8k_override()["gsm8k"], "repo": "acme/gsm8k-copy",
                                                           "revision": "main"}})
        got = download.get(["gsm8k"], str(tmp_path / "moved"), splits=["train"], endpoint=private.url,
                           catalog_file=moved, say=lambda s: None)["gsm8k"]
    assert (got["repo"], got["revision"], got["revision_pinned"], got["commit"]) == \
        ("acme/gsm8k-copy", "main", False, "ab" * 20)
    assert read_jsonl(tmp_path / "moved/math/gsm8k_train.jsonl") == EXPECTED["math/gsm8k_train.jsonl"]
    # `data list --catalog` shows the overridden values; without it, the built-in ones
    rows = {r["benchmark"]: r for r in download.list_rows(str(tmp_path / "data"), catalog_file=moved)}
    assert (rows["gsm8k"]["repo"], rows["gsm8k"]["rows"], rows["gsm8k"]["catalog"]) == \
        ("acme/gsm8k-copy", {"train": 2, "test": 1}, moved)
    assert rows["math500"]["catalog"] == catalog.BUILT_IN and rows["math500"]["rows"] == {"test": 500}
    assert download.format_list(list(rows.values())).splitlines()[-2] == \
        f"catalog: gsm8k from {moved}; the rest built in"
    assert download.list_rows(str(tmp_path / "data"))[0]["rows"] == {"train": 7473, "test": 1319}


@pytest.mark.parametrize("spec, message", [
    ({"gsm9k": {"rows": {"test": 1}}}, r"benchmark='gsm9k'; allowed: \['gsm8k', 'math500', .*'codecontests'\]$"),
    ({"gsm8k": {"checksum": {}}}, r"gsm8k: key='checksum'; allowed: \['repo', 'revision', 'sha256', 'rows'\]$"),
    ({"gsm8k": {"rows": {"dev": 1}}}, r"gsm8k: rows split='dev'; allowed: \['train', 'test'\]$"),
    ({"gsm8k": {"rows": {"test": "1319"}}}, r"gsm8k: rows of 'test' = '1319'; allowed: an integer >= 0$"),
    ({"gsm8k": {"sha256": {"test.parquet": "0" * 64}}},
     r"gsm8k: sha256 file='test.parquet'; allowed: \['main/train-00000-of-00001.parquet', 'main/test-"),
    ({"gsm8k": {"sha256": {"main/test-00000-of-00001.parquet": "abc"}}}, r"allowed: 64 lowercase hex digits"),
    ({"gsm8k": {"repo": "gsm8k"}}, r"gsm8k: repo='gsm8k'; allowed: 'owner/name'$"),
    ("{not json", r"not JSON \(Expecting property name enclosed in double quotes: line 1 column 2"),
    ([], r"expected a non-empty object"),
])
def test_bad_catalog_is_a_one_line_error(tmp_path, spec, message):
    file = _write(tmp_path / "c.json", spec)
    with pytest.raises(catalog.CatalogError, match=rf"^--catalog {re.escape(file)}: .*{message}") as err:
        download.get(["gsm8k"], str(tmp_path / "data"), catalog_file=file, say=lambda s: None)
    assert "\n" not in str(err.value) and not (tmp_path / "data").exists()  # refused before anything is fetched
    with pytest.raises(catalog.CatalogError, match=message):
        download.list_rows(str(tmp_path / "data"), catalog_file=file)


def test_cli_bad_catalog(tmp_path):
    env = {"PRD_DATA_DIR": str(tmp_path / "data"), "HF_ENDPOINT": "http://127.0.0.1:9"}
    cases = {"missing": (str(tmp_path / "nope.json"), "cannot read it (No such file or directory)"),
             "unknown": (_write(tmp_path / "u.json", {"gsm8k": {"revison": "main"}}),
                         "gsm8k: key='revison'; allowed: ['repo', 'revision', 'sha256', 'rows']"),
             "json": (_write(tmp_path / "j.json", "{,}"), "not JSON")}
    for action in (["get", "gsm8k"], ["list"]):
        for name, (file, message) in cases.items():
            done = _cli(["data", *action, "--catalog", file], env)
            assert done.returncode == 2, (action, name, done.stderr)
            assert done.stderr.count("\n") == 1, done.stderr
            assert done.stderr.startswith(f"prd-jax data: error: --catalog {file}: "), done.stderr
            assert message in done.stderr, done.stderr
    assert not (tmp_path / "data").exists()


# -- the standalone mirror, publishing the shared data, and `prd-jax data get` from the command line

@pytest.fixture
def standalone_mirror(tmp_path):
    """`python tests/hub_mirror.py ... --from-data-dir <shared data> gsm8k` in a subprocess: (url, catalog file)."""
    if not SHARED.is_dir():
        pytest.skip("no shared data dir beside the repository")
    catalog_file = tmp_path / "mirror" / "catalog.json"
    catalog_file.parent.mkdir()
    proc = subprocess.Popen([sys.executable, "tests/hub_mirror.py", "--port", "0", "--root", str(tmp_path / "mirror"),
                             "--write-catalog", str(catalog_file), "--from-data-dir", str(SHARED), "gsm8k"],
                            cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), (url, proc.poll() is not None and proc.stderr.read())
        assert proc.stdout.readline().startswith("serving gsm8k (train 7473, test 1319 rows); catalog: ")
        yield url, catalog_file
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_standalone_mirror_and_cli_reproduce_the_shared_gsm8k(standalone_mirror, tmp_path):
    url, catalog_file = standalone_mirror
    spec = json.loads(catalog_file.read_text())
    assert list(spec) == ["gsm8k"] and spec["gsm8k"]["rows"] == {"train": 7473, "test": 1319}
    assert sorted(spec["gsm8k"]["sha256"]) == ["main/test-00000-of-00001.parquet", "main/train-00000-of-00001.parquet"]
    served = tmp_path / "mirror/datasets/openai/gsm8k/main/test-00000-of-00001.parquet"
    assert hashlib.sha256(served.read_bytes()).hexdigest() == spec["gsm8k"]["sha256"]["main/test-00000-of-00001.parquet"]
    assert pq.read_schema(served).names == ["question", "answer"]
    out = tmp_path / "out"
    env = {"HF_ENDPOINT": url, "HF_HUB_DISABLE_PROGRESS_BARS": "1",
           "NO_PROXY": ",".join(filter(None, [os.environ.get("NO_PROXY"), "127.0.0.1"]))}
    refused = _cli(["data", "get", "gsm8k", "--dir", str(out)], env)  # the real pins refuse the mirror's parquet
    assert refused.returncode == 2 and "(pinned in prd_jax/data/catalog.py); refusing it" in refused.stderr
    done = _cli(["data", "get", "gsm8k", "--dir", str(out), "--catalog", str(catalog_file)], env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (f"gsm8k: train 7473 rows, test 1319 rows (openai/gsm8k@740312add88f) -> {out} "
                           f"[catalog: {catalog_file}]\n")
    for split in ("train", "test"):
        rel = f"math/gsm8k_{split}.jsonl"
        assert read_jsonl(out / rel) == read_jsonl(SHARED / rel), rel
    manifest = json.loads((out / download.MANIFEST).read_text())["gsm8k"]
    assert manifest["catalog_override"] == {"path": str(catalog_file), "keys": ["repo", "revision", "rows", "sha256"],
                                            "sha256": hashlib.sha256(catalog_file.read_bytes()).hexdigest()}
    assert manifest["endpoint"] == url
    listed = _cli(["data", "list", "--dir", str(out), "--catalog", str(catalog_file)], env)
    assert listed.returncode == 0 and listed.stdout.splitlines()[0].startswith("gsm8k          present ")
    assert listed.stdout.splitlines()[-2] == f"catalog: gsm8k from {catalog_file}; the rest built in"


def test_mirror_publishes_every_convertible_benchmark_from_a_data_dir(tmp_path):
    """Each publisher (hub_mirror.PUBLISHERS) inverts its converter: the shared data, published and
    fetched back through `--catalog`, is what was there (the shared copy has no train split of MATH-500 etc.)."""
    if not SHARED.is_dir():
        pytest.skip("no shared data dir beside the repository")
    with HubMirror() as m:
        spec = m.publish([], str(SHARED))
        assert sorted(spec) == ["aime2024", "aime2025", "gsm8k", "humaneval", "math500"]
        file = _write(tmp_path / "mirror.json", spec)
        download.get(list(spec), str(tmp_path / "data"), endpoint=m.url, catalog_file=file, say=lambda s: None)
    for b in catalog.BENCHMARKS:
        for s in b.splits if b.name in spec else ():
            assert read_jsonl(tmp_path / "data" / s.dest) == read_jsonl(SHARED / s.dest), s.dest
    assert spec["aime2025"]["rows"] == {"test": 30} and len(spec["aime2025"]["sha256"]) == 2


def test_every_built_in_benchmark_task_has_a_catalog_entry():
    """Each task the package registers over benchmark files (not a synthetic draw) names the
    `prd-jax data get` entry that fetches its data, so a missing file names the command."""
    from prd_jax.data import catalog
    from prd_jax.tasks import get_task, task_names
    from prd_jax.tasks.synthetic import DrawnTask

    built_in = [n for n in task_names() if type(get_task(n)).__module__.startswith("prd_jax.tasks")
                and not isinstance(get_task(n), DrawnTask)]
    assert {"gsm8k", "livecodebench_release_v6", "codecontests", "hmmt_feb2025"} <= set(built_in)
    assert [n for n in built_in if catalog.for_task(n) is None] == []
