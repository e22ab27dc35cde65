"""prd_jax.data: data-dir resolution, JSONL reading, TFDS builders, seqio vocabulary and tasks
(the builders and seqio tasks made from the built-in tasks' `JsonlFiles` declarations).

Reads the benchmark files from the shared data dir ($PRD_DATA_DIR, which tests/conftest.py sets
to `../shared/data` from the repo root when unset). TFDS datasets are prepared into per-module tmp
dirs, never the user cache.
"""

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import pytest  # noqa: E402

from prd_jax.data import jsonl, paths  # noqa: E402
from prd_jax.tasks import get_task  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]

COUNTS = {"gsm8k_train": 7473, "gsm8k_test": 1319, "math500": 500, "aime2024": 30,
          "aime2025": 30}
# file name -> (task, split) that declares it (tasks/math.py)
FILES = {"gsm8k_train": ("gsm8k", "train"), "gsm8k_test": ("gsm8k", "test"), "math500": ("math500", "test"),
         "aime2024": ("aime2024", "test"), "aime2025": ("aime2025", "test")}
SAMPLE_STRINGS = [
    "Janet’s ducks lay 16 eggs per day.",
    "Find $\\frac{1}{2} + \\sqrt{x^2}$, where x ≥ 0.",
    "Grüße aus Köln — naïve café, 日本語のテキスト, emoji 😀🚀",
    "  leading spaces,\ttabs\nand\n\nnewlines  ",
    "",
]


def _file(name, root=None):
    task, split = FILES[name]
    return os.path.join(root or paths.data_dir(), *dict(get_task(task).source.splits)[split].split("/"))


def _lines(name):
    with open(_file(name), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _builder_cls(tfds_builders, task):
    source = get_task(task).source
    return tfds_builders.builder_class(f"prd_{task}", dict(source.splits), source.fields, source.id_key,
                                       source.derived)


# ---------------------------------------------------------------- paths and JSONL


def test_data_dir_resolution(monkeypatch, tmp_path):
    monkeypatch.delenv(paths.DATA_DIR_ENV, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))  # the default: the user data dir
    assert paths.default_data_dir() == str(tmp_path / "xdg" / "prd_jax" / "data")
    with pytest.raises(FileNotFoundError, match=r"does not exist\. Fetch the benchmarks with `prd-jax data get NAME`"):
        paths.data_dir()
    (tmp_path / "xdg" / "prd_jax" / "data").mkdir(parents=True)
    assert paths.data_dir() == str(tmp_path / "xdg" / "prd_jax" / "data")
    monkeypatch.delenv("XDG_DATA_HOME")
    assert paths.default_data_dir() == os.path.join(os.path.expanduser("~"), ".local", "share", "prd_jax", "data")
    monkeypatch.setenv(paths.DATA_DIR_ENV, str(tmp_path))
    assert paths.data_dir() == str(tmp_path)
    explicit = tmp_path / "explicit"
    explicit.mkdir()
    assert paths.data_dir(str(explicit)) == str(explicit)
    with pytest.raises(FileNotFoundError, match=paths.DATA_DIR_ENV):
        paths.data_dir(str(tmp_path / "nope"))


def test_tfds_dir_resolution(monkeypatch, tmp_path):
    monkeypatch.delenv(paths.TFDS_DIR_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert paths.tfds_dir() == str(tmp_path / "prd_jax" / "tfds")
    monkeypatch.setenv(paths.TFDS_DIR_ENV, str(tmp_path / "env"))
    assert paths.tfds_dir() == str(tmp_path / "env")
    assert paths.tfds_dir(str(tmp_path / "x")) == str(tmp_path / "x")


@pytest.mark.parametrize("name,count", sorted(COUNTS.items()))
def test_read_jsonl_counts(name, count):
    rows = jsonl.read_jsonl(_file(name))
    assert len(rows) == count
    assert len({r["id"] for r in rows}) == count
    for r in rows:
        assert all(isinstance(r[k], str) and r[k] for k in ("id", "problem", "answer"))


def test_read_jsonl_rows_equal_jsonl_lines():
    rows = jsonl.read_jsonl(_file("gsm8k_test"))
    assert rows[0] == _lines("gsm8k_test")[0]
    assert rows[0]["id"] == "gsm8k-test-0" and rows[0]["answer"] == "18"
    assert rows[0]["problem"].startswith("Janet’s ducks lay 16 eggs per day.")
    aime = jsonl.read_jsonl(_file("aime2025"))
    assert aime == _lines("aime2025")
    assert aime[0]["answer"] == "70"
    m500 = jsonl.read_jsonl(_file("math500"), limit=3)
    assert len(m500) == 3 and {"subject", "level"} <= set(m500[0])
    assert jsonl.read_jsonl(_file("aime2024"), limit=0) == []


def test_missing_file_names_path_and_env(monkeypatch, tmp_path):
    monkeypatch.setenv(paths.DATA_DIR_ENV, str(tmp_path))
    expected = str(tmp_path / "math" / "gsm8k_test.jsonl")
    with pytest.raises(FileNotFoundError) as err:
        get_task("gsm8k").problems("test")  # checked before TensorFlow loads
    assert expected in str(err.value)
    assert "PRD_DATA_DIR" in str(err.value)
    with pytest.raises(ValueError, match=r"task 'prd_aime2024' has no split 'train'; allowed splits: \['test'\]"):
        get_task("aime2024").problems("train")


@pytest.mark.parametrize("bad_line,needle", [
    ({"id": "b", "problem": "p"}, "missing key 'answer'"),
    ({"id": "b", "problem": "p", "answer": 7}, "invalid key 'answer'"),
    ({"id": "b", "problem": "", "answer": "7"}, "invalid key 'problem'"),
    ({"id": "a", "problem": "p", "answer": "7"}, "duplicate id"),
    ("{not json", "invalid JSON"),
])
def test_malformed_line_names_file_and_line(tmp_path, bad_line, needle):
    (tmp_path / "math").mkdir()
    path = tmp_path / "math" / "aime2024.jsonl"
    good = json.dumps({"id": "a", "problem": "p", "answer": "1"})
    bad = bad_line if isinstance(bad_line, str) else json.dumps(bad_line)
    path.write_text(f"{good}\n\n{bad}\n", encoding="utf-8")
    with pytest.raises(ValueError) as err:
        jsonl.read_jsonl(path)
    assert f"{path}:3" in str(err.value) and needle in str(err.value)
    assert jsonl.read_jsonl(path, limit=1) == [json.loads(good)]


def test_import_is_lightweight():
    code = ("import sys, prd_jax.data as d, prd_jax.tasks as t; "
            "d.read_jsonl(d.data_dir() + '/' + dict(t.get_task('aime2024').source.splits)['test'], limit=1); "
            "bad = [m for m in ('tensorflow', 'seqio', 'tensorflow_datasets') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO_ROOT, timeout=120)


# ---------------------------------------------------------------- TFDS builders


@pytest.fixture(scope="module")
def tfds_builders():
    from prd_jax.data import tfds_builders
    import tensorflow_datasets as tfds

    tfds.display_progress_bar(False)
    return tfds_builders


@pytest.fixture(scope="module")
def tfds_root(tmp_path_factory):
    return str(tmp_path_factory.mktemp("tfds"))


@pytest.fixture(scope="module")
def built(tfds_builders, tfds_root):
    return {name: tfds_builders.build(_builder_cls(tfds_builders, name), tfds_dir=tfds_root)
            for name in ("gsm8k", "math500", "aime2024", "aime2025")}


def _decode_rows(ds):
    return [{k: v.decode("utf-8") for k, v in ex.items()} for ex in ds.as_numpy_iterator()]


def test_tfds_counts(built):
    counts = {name: {split: int(ds.cardinality()) for split, ds in splits.items()}
              for name, splits in built.items()}
    assert counts == {"gsm8k": {"train": 7473, "test": 1319}, "math500": {"test": 500},
                      "aime2024": {"test": 30}, "aime2025": {"test": 30}}


@pytest.mark.parametrize("name,split,jsonl_name", [
    ("aime2024", "test", "aime2024"), ("aime2025", "test", "aime2025"),
    ("math500", "test", "math500")])
def test_tfds_rows_equal_jsonl(built, name, split, jsonl_name):
    rows = _decode_rows(built[name][split])
    fields = get_task(name).source.fields  # id, problem, answer (+ solution where published)
    want = [{k: r[k] for k in fields} for r in _lines(jsonl_name)]
    assert rows == want  # same rows, same (file) order


def test_tfds_gsm8k_known_rows(built):
    first = _decode_rows(built["gsm8k"]["test"].take(1))[0]
    line = _lines("gsm8k_test")[0]
    assert first == {"id": line["id"], "problem": line["problem"], "answer": line["answer"],
                     "solution": line["solution"]}
    assert first["answer"] == "18"
    train_first = _decode_rows(built["gsm8k"]["train"].take(1))[0]
    assert train_first["id"] == "gsm8k-train-0"


def test_tfds_prepare_is_idempotent(tfds_builders, tfds_root, built, tmp_path):
    data_path = Path(tfds_root) / "prd_aime2024" / "1.0.0"
    before = {p.name: p.stat().st_mtime_ns for p in data_path.iterdir()}
    # An empty data dir proves the second call reuses the prepared data without reading JSONL.
    again = tfds_builders.build(_builder_cls(tfds_builders, "aime2024"), data_dir=str(tmp_path), tfds_dir=tfds_root)
    assert int(again["test"].cardinality()) == 30
    assert {p.name: p.stat().st_mtime_ns for p in data_path.iterdir()} == before


def test_tfds_prepare_waits_for_a_concurrent_writer(tfds_builders, tmp_path):
    """Two processes preparing one dataset in a fresh TFDS dir (pytest workers, pod hosts): the
    second waits on the first one's lock and reuses its copy instead of failing the rename (the
    CI failure of a clean clone: FileExistsError from two workers at collection)."""
    root = str(tmp_path / "tfds")
    code = textwrap.dedent(f"""
        import sys
        from prd_jax.data import tfds_builders
        from prd_jax.tasks import get_task
        s = get_task("aime2024").source
        cls = tfds_builders.builder_class("prd_aime2024", dict(s.splits), s.fields, s.id_key, s.derived)
        print("ready", flush=True)
        b = tfds_builders.prepare(cls, tfds_dir={root!r})
        print(b.info.splits["test"].num_examples, flush=True)
    """)
    cls = _builder_cls(tfds_builders, "aime2024")
    builder = tfds_builders.get_builder(cls, root)
    with tfds_builders._preparing(builder):
        other = subprocess.Popen([sys.executable, "-c", code], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
        assert other.stdout.readline().strip() == "ready"
        time.sleep(1.0)
        assert other.poll() is None  # blocked on the lock, not preparing beside us
        builder.download_and_prepare(download_config=tfds_builders.download_config())
        mtimes = {p.name: p.stat().st_mtime_ns for p in Path(builder.data_dir).iterdir()}
    out, _ = other.communicate(timeout=300)
    assert other.returncode == 0 and out.strip() == "30"
    assert {p.name: p.stat().st_mtime_ns for p in Path(builder.data_dir).iterdir()} == mtimes  # reused


def test_tfds_missing_manual_file(tfds_builders, tmp_path):
    (tmp_path / "data" / "math").mkdir(parents=True)
    with pytest.raises(FileNotFoundError) as err:
        tfds_builders.build(_builder_cls(tfds_builders, "aime2025"), data_dir=str(tmp_path / "data"),
                            tfds_dir=str(tmp_path / "tfds"))
    assert str(tmp_path / "data" / "math" / "aime2025.jsonl") in str(err.value)
    assert "PRD_DATA_DIR" in str(err.value)


def test_builder_declarations(tfds_builders):
    cls = _builder_cls(tfds_builders, "aime2024")
    assert _builder_cls(tfds_builders, "aime2024") is cls  # one class per declaration
    assert (cls.name, cls.SPLIT_FILES) == ("prd_aime2024", (("test", "math/aime2024.jsonl"),))
    with pytest.raises(ValueError, match="already declared"):
        tfds_builders.builder_class("prd_aime2024", {"test": "math/aime2025.jsonl"})
    with pytest.raises(ValueError, match="allowed: lower-case letters"):
        tfds_builders.builder_class("Prd-X", {"test": "x.jsonl"})
    with pytest.raises(ValueError, match="id_key='key' must be one of the fields"):
        tfds_builders.builder_class("prd_x", {"test": "x.jsonl"}, id_key="key")


# ---------------------------------------------------------------- seqio vocabulary


@pytest.fixture(scope="module")
def tokenizer():
    from prd_jax.model.loader import smollm2_gguf_path
    from prd_jax.model.tokenizer import Tokenizer

    return Tokenizer.from_gguf(smollm2_gguf_path())


@pytest.fixture(scope="module")
def vocab(tokenizer):
    from prd_jax.data.vocab import HFVocabulary

    return HFVocabulary(tokenizer)


def test_vocab_special_ids(vocab, tokenizer):
    assert vocab.vocab_size == tokenizer.vocab_size == 49152
    assert vocab.extra_ids == 0
    assert (vocab.eos_id, vocab.bos_id, vocab.pad_id) == (2, 1, 2)
    assert vocab.unk_id == tokenizer.unk_id


@pytest.mark.parametrize("text", SAMPLE_STRINGS)
def test_vocab_encode_decode_python(vocab, tokenizer, text):
    ids = vocab.encode(text)
    assert list(ids) == tokenizer.encode(text)
    assert vocab.decode(ids) == text
    # seqio's decode stops at the first EOS.
    assert vocab.decode(list(ids) + [vocab.eos_id] + tokenizer.encode("tail")) == text


def test_vocab_tf_matches_python(vocab, tokenizer):
    import tensorflow as tf

    for text in SAMPLE_STRINGS:
        ids = vocab.encode_tf(tf.constant(text))
        assert ids.dtype == tf.int32 and ids.shape.rank == 1
        assert ids.numpy().tolist() == tokenizer.encode(text)
        assert vocab.decode_tf(ids).numpy().decode("utf-8") == text
    ragged = vocab.encode_tf(tf.constant(SAMPLE_STRINGS))
    assert ragged.to_list() == [tokenizer.encode(t) for t in SAMPLE_STRINGS]
    a, b = tokenizer.encode("x = 1"), tokenizer.encode("y ≠ 2")
    batch = tf.constant([a + [vocab.eos_id] + b, b + [vocab.eos_id] + a], dtype=tf.int32)
    assert [s.decode() for s in vocab.decode_tf(batch).numpy()] == ["x = 1", "y ≠ 2"]
    ds = tf.data.Dataset.from_tensor_slices(SAMPLE_STRINGS).map(vocab.encode_tf)
    assert [x.tolist() for x in ds.as_numpy_iterator()] == [tokenizer.encode(t)
                                                          for t in SAMPLE_STRINGS]


def test_vocab_equality(vocab, tokenizer):
    from prd_jax.data.vocab import HFVocabulary

    other = HFVocabulary(tokenizer)
    assert other == vocab and hash(other) == hash(vocab)
    assert vocab != object()


# ---------------------------------------------------------------- seqio tasks


TOKENIZED = ["prd_gsm8k", "prd_math500", "prd_aime2024", "prd_aime2025"]


@pytest.fixture(scope="module")
def task_names(vocab, tfds_builders, tfds_root, built):
    from prd_jax.data import seqio_tasks

    for name in TOKENIZED:
        seqio_tasks.register_rows_task(name, _builder_cls(tfds_builders, name[len("prd_"):]), tfds_dir=tfds_root)
    names = seqio_tasks.register_tokenized(vocab, TOKENIZED)
    assert seqio_tasks.register_tokenized(vocab, TOKENIZED) == names  # idempotent
    return names


def test_task_names(task_names):
    import seqio

    assert task_names == TOKENIZED
    assert all(seqio.get_mixture_or_task(n).output_features["targets"].add_eos for n in task_names)


def test_task_aime_targets_decode_to_answer(task_names, vocab):
    import seqio

    task = seqio.get_mixture_or_task("prd_aime2025")
    assert task.num_input_examples("test") == 30
    examples = list(task.get_dataset(sequence_length=None, split="test", shuffle=False)
                    .as_numpy_iterator())
    lines = _lines("aime2025")
    assert len(examples) == 30
    for ex, line in zip(examples, lines):
        assert ex["id"].decode() == line["id"]
        assert ex["targets"][-1] == vocab.eos_id
        assert vocab.eos_id not in ex["targets"][:-1].tolist()
        assert vocab.decode(ex["targets"]) == line["answer"]
        assert ex["inputs"].tolist() == vocab.encode(line["problem"])  # no EOS on inputs
        assert ex["targets_pretokenized"].decode() == line["answer"]


def test_task_gsm8k_and_prompt_template(task_names, vocab, tfds_root):
    import seqio

    from prd_jax.data import seqio_tasks

    ex = next(seqio.get_mixture_or_task("prd_gsm8k")
              .get_dataset(sequence_length=None, split="test", shuffle=False)
              .as_numpy_iterator())
    assert vocab.decode(ex["targets"]) == "18" and ex["targets"][-1] == vocab.eos_id
    try:
        for template in ("Question: {problem}\nAnswer:", lambda p: f"Question: {p}\nAnswer:"):
            seqio_tasks.register_tokenized(vocab, TOKENIZED, prompt_template=template)
            ex = next(seqio.get_mixture_or_task("prd_aime2024")
                      .get_dataset(sequence_length=None, split="test", shuffle=False)
                      .as_numpy_iterator())
            line = _lines("aime2024")[0]
            prompt = f"Question: {line['problem']}\nAnswer:"
            assert ex["inputs_pretokenized"].decode() == prompt
            assert ex["inputs"].tolist() == vocab.encode(prompt)
            assert vocab.decode(ex["targets"]) == line["answer"] == "204"
    finally:
        seqio_tasks.register_tokenized(vocab, TOKENIZED)


def test_task_rows_follow_changed_files(tmp_path, monkeypatch):
    """A task's rows come from the files as they are now: a replaced file (another download,
    an edit) is prepared afresh, not read from the TFDS copy of the old one."""
    monkeypatch.setenv(paths.TFDS_DIR_ENV, str(tmp_path / "tfds"))
    (tmp_path / "data" / "math").mkdir(parents=True)
    path = tmp_path / "data" / "math" / "aime2025.jsonl"

    def write(answers):
        path.write_text("".join(json.dumps({"id": f"p{i}", "problem": f"q{i}", "answer": a}) + "\n"
                                for i, a in enumerate(answers)))

    task = get_task("aime2025")
    write(["1", "2"])
    assert [r["answer"] for r in task.problems("test", data_dir=str(tmp_path / "data"))] == ["1", "2"]
    write(["7", "8", "9"])
    os.utime(path, ns=(1, 1))  # a new mtime even on a coarse clock
    assert [r["answer"] for r in task.problems("test", data_dir=str(tmp_path / "data"))] == ["7", "8", "9"]


def test_gsm8k_rows_carry_the_worked_solution():
    rows = get_task("gsm8k").problems("train", limit=2)
    assert rows[0]["solution"] == _lines("gsm8k_train")[0]["solution"]
    assert rows[0]["solution"].rstrip().endswith("#### " + rows[0]["answer"])
