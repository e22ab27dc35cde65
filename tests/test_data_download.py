"""`prd-jax data get | list` against a loopback Hub mirror (tests/hub_mirror.py), through the real
`huggingface_hub` client: fixture rows in each publisher's format (parquet written here with
pyarrow, JSONL) are fetched, verified, converted, and must equal hand-written rows; a wrong
checksum or row count is refused and writes nothing; `data list` and `tasks.require_data` see what
is there; an eval on a missing benchmark stops before any model loads.

Fixture files are not the real ones, so the fixture catalog is the real catalog (repos, revisions,
file names, converters, destinations) with the fixtures' sha256 and row counts.
"""

import dataclasses
import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hub_mirror import HubMirror
from prd_jax.data import catalog, download
from prd_jax.tasks import get_task, require_data

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED = REPO_ROOT.parent / "shared" / "data"


def parquet(rows: list) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buf)
    return buf.getvalue()


def jsonl(rows: list) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


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
FIXTURES = {  # (repo, path in repo) -> bytes
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
MAIN_COMMIT = "c0ffee" + "0" * 34  # what the mirror's "main" resolves to for the unpinned repo


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
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


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
    from prd_jax import evaluate as ev
    from prd_jax.config_io import load_config

    def no_model(*a, **k):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(ev, "load", no_model)
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
    config.data.data_dir = str(tmp_path / "empty")
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
