"""SFT data path: chat rendering, packing/padding, the resumable iterator, the chat-trace
TFDS builder and seqio task (`prd_jax.data.sft`, `prd_jax.data.chat_traces`)."""

import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from prd_jax.data import chat_traces, sft  # noqa: E402
from prd_jax.data.synthetic import CharVocab  # noqa: E402

VOCAB = CharVocab()
# Raw ids, hand-checked below: (prompt, completion).
THREE = [([10, 11], [12, 1]), ([20], [21, 22, 1]), ([30, 31, 32], [33, 1])]


def _ids(text):
    return VOCAB.encode(text)


def _write(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write((row if isinstance(row, str) else json.dumps(row)) + "\n")


def _rows(n, start=0):
    """n trace rows alternating the two formats, varied lengths."""
    rows = []
    for i in range(start, start + n):
        prompt, response = f"q{i}" + "x" * (i % 5), f"a{i}" + "y" * (i % 3)
        if i % 2:
            rows.append({"id": f"r{i}", "prompt": prompt, "response": response})
        else:
            rows.append({"id": f"r{i}", "messages": [{"role": "system", "content": "s"},
                                                      {"role": "user", "content": prompt},
                                                      {"role": "assistant", "content": response}]})
    return rows


# ---------------------------------------------------------------- rendering


def test_render_example_charvocab():
    prompt, completion = sft.render_example(VOCAB, "ab", "cd")
    assert prompt == [4, 73, 74, 6, 5]          # <|user|> a b \n <|assistant|>
    assert completion == [75, 76, 1]            # c d <|eos|>
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "a"},
                {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]
    prompt, completion = sft.render_example(VOCAB, messages, "d")
    assert prompt == _ids("<|system|>s\n<|user|>a\n<|assistant|>b<|eos|><|user|>c\n<|assistant|>")
    assert completion == [_ids("d")[0], VOCAB.eos_id]
    # prompt + completion is exactly the template's rendering of the whole chat
    full = VOCAB.encode_chat(messages + [{"role": "assistant", "content": "d"}],
                             add_generation_prompt=False)
    assert prompt + completion == full


def test_render_example_smollm2():
    loader = pytest.importorskip("prd_jax.model.loader")
    from prd_jax.model.tokenizer import Tokenizer
    try:
        tok = Tokenizer.from_gguf(loader.smollm2_gguf_path())
    except (ModuleNotFoundError, FileNotFoundError) as e:
        pytest.skip(str(e))
    prompt, completion = sft.render_example(tok, "What is 2+2?", "4")
    im_end = tok.token_to_id("<|im_end|>")
    assert im_end == 2 and completion == tok.encode("4") + [im_end]
    assert prompt == tok.encode_chat([{"role": "user", "content": "What is 2+2?"}])
    assert tok.decode(prompt, skip_special=False).endswith("<|im_start|>assistant\n")


# ---------------------------------------------------------------- pack / pad


def test_pack_three_examples_exact():
    batches, counts = sft.pack(THREE, seq_len=8, batch_size=2)
    assert counts == sft.FitCounts(3, 0, 0) and len(batches) == 1
    b = batches[0]
    assert {k: v.dtype for k, v in b.items()} == {
        "inputs": np.int32, "targets": np.int32, "positions": np.int32,
        "segment_ids": np.int32, "weights": np.float32}
    # row 0: examples 0 and 1 (3 + 3 slots); example 2 (4 slots) does not fit -> row 1
    np.testing.assert_array_equal(b["inputs"], [[10, 11, 12, 20, 21, 22, 0, 0],
                                                [30, 31, 32, 33, 0, 0, 0, 0]])
    np.testing.assert_array_equal(b["targets"], [[11, 12, 1, 21, 22, 1, 0, 0],
                                                 [31, 32, 33, 1, 0, 0, 0, 0]])
    np.testing.assert_array_equal(b["positions"], [[0, 1, 2, 0, 1, 2, 0, 0],
                                                   [0, 1, 2, 3, 0, 0, 0, 0]])
    np.testing.assert_array_equal(b["segment_ids"], [[1, 1, 1, 2, 2, 2, 0, 0],
                                                     [1, 1, 1, 1, 0, 0, 0, 0]])
    np.testing.assert_array_equal(b["weights"], [[0, 1, 1, 1, 1, 1, 0, 0],
                                                 [0, 0, 1, 1, 0, 0, 0, 0]])


def test_pad_three_examples_exact():
    batches, counts = sft.pad(THREE, seq_len=5, batch_size=2, pad_id=7)
    assert counts == sft.FitCounts(3, 0, 0) and len(batches) == 2
    b0, b1 = batches
    np.testing.assert_array_equal(b0["inputs"], [[10, 11, 12, 7, 7], [20, 21, 22, 7, 7]])
    np.testing.assert_array_equal(b0["targets"], [[11, 12, 1, 7, 7], [21, 22, 1, 7, 7]])
    np.testing.assert_array_equal(b0["positions"], [[0, 1, 2, 0, 0], [0, 1, 2, 0, 0]])
    np.testing.assert_array_equal(b0["segment_ids"], [[1, 1, 1, 0, 0], [1, 1, 1, 0, 0]])
    np.testing.assert_array_equal(b0["weights"], [[0, 1, 1, 0, 0], [1, 1, 1, 0, 0]])
    # last batch: one example and an empty row
    np.testing.assert_array_equal(b1["inputs"], [[30, 31, 32, 33, 7], [7] * 5])
    np.testing.assert_array_equal(b1["segment_ids"], [[1, 1, 1, 1, 0], [0] * 5])
    np.testing.assert_array_equal(b1["weights"], [[0, 0, 1, 1, 0], [0] * 5])


def test_overlong_truncate_and_drop():
    examples = [([1, 2, 3, 4, 5], [6, 7]), ([1], [2, 3, 4, 5, 6]), ([8], [9])]
    batches, counts = sft.pad(examples, seq_len=4, batch_size=2)
    assert counts == sft.FitCounts(3, num_truncated=1, num_dropped=1)
    b = batches[0]
    # prompt cut from the left to its last 3 tokens: [3, 4, 5, 6, 7] fills the 4 slots
    np.testing.assert_array_equal(b["inputs"], [[3, 4, 5, 6], [8, 0, 0, 0]])
    np.testing.assert_array_equal(b["targets"], [[4, 5, 6, 7], [9, 0, 0, 0]])
    np.testing.assert_array_equal(b["weights"], [[0, 0, 1, 1], [1, 0, 0, 0]])
    _, counts = sft.pack(examples, seq_len=4, batch_size=2, overlong="drop")
    assert counts == sft.FitCounts(3, num_truncated=0, num_dropped=2)
    with pytest.raises(ValueError, match="overlong='cut'"):
        sft.pack(examples, 4, 2, overlong="cut")
    with pytest.raises(ValueError, match=r"examples\[0\]"):
        sft.pack([([], [1])], 4, 2)


def test_weights_and_positions_on_rendered_rows():
    """Weights are 1 exactly on completion targets; positions restart per segment."""
    examples = sft.examples_from_rows(VOCAB, _rows(12))
    batches, counts = sft.pack(examples, seq_len=40, batch_size=3)
    assert counts == sft.FitCounts(12, 0, 0)
    segments = []
    for b in batches:
        for r in range(b["inputs"].shape[0]):
            seg = b["segment_ids"][r]
            assert np.all(b["weights"][r][seg == 0] == 0)
            assert np.all(b["positions"][r][seg == 0] == 0)
            for s in range(1, seg.max() + 1):
                idx = np.flatnonzero(seg == s)
                assert np.all(np.diff(idx) == 1)  # contiguous
                np.testing.assert_array_equal(b["positions"][r, idx], np.arange(idx.size))
                segments.append((b["inputs"][r, idx], b["targets"][r, idx], b["weights"][r, idx]))
    assert len(segments) == 12 and len(batches) == 2
    for (prompt, completion), (inputs, targets, weights) in zip(examples, segments):
        tokens = np.concatenate([prompt, completion])
        np.testing.assert_array_equal(inputs, tokens[:-1])
        np.testing.assert_array_equal(targets, tokens[1:])
        np.testing.assert_array_equal(targets[weights == 1], completion)
        assert set(np.unique(weights)) == {0.0, 1.0}
        assert weights.sum() == completion.size and np.all(weights[:prompt.size - 1] == 0)


def test_packed_row_matches_examples_alone():
    """Through the decoder, each packed segment gets the logits it gets alone."""
    import jax

    from prd_jax.model import forward
    from prd_jax.model.config import get_model_config
    from prd_jax.model.decoder import param_shapes

    cfg = get_model_config("tiny")
    rng = np.random.default_rng(0)  # random params without the (slow, eager) flax init
    params = jax.tree.map(lambda s: (0.2 * rng.standard_normal(s.shape)).astype(s.dtype),
                          param_shapes(cfg))
    (packed,), _ = sft.pack(THREE, seq_len=8, batch_size=2)
    (alone,), _ = sft.pad(THREE[:2], seq_len=8, batch_size=2)
    both = {k: np.concatenate([packed[k], alone[k]]) for k in sft.BATCH_KEYS}  # one compile
    logits, _ = jax.jit(lambda p, b: forward(cfg, p, b["inputs"], b["positions"],
                                             segment_ids=b["segment_ids"]))(params, both)
    logits = np.asarray(logits)
    assert np.abs(logits[0, :3] - logits[0, 3:6]).max() > 1e-2  # different examples differ
    np.testing.assert_allclose(logits[0, :3], logits[2, :3], atol=1e-5)
    np.testing.assert_allclose(logits[0, 3:6], logits[3, :3], atol=1e-5)


# ---------------------------------------------------------------- iterator


def _equal(a, b):
    return all(np.array_equal(a[k], b[k]) for k in sft.BATCH_KEYS)


@pytest.fixture(scope="module")
def examples():
    return sft.examples_from_rows(VOCAB, _rows(10))


def _iterator(examples, seed=3, **kw):
    return sft.SFTBatches(examples, seq_len=32, batch_size=2, seed=seed, **kw)


def test_iterator_state_restore(examples):
    it = _iterator(examples)
    batches = [next(it) for _ in range(9)]
    state = json.loads(json.dumps(it.state()))
    assert state["epoch"] >= 1  # 9 batches run past the first epoch
    following = [next(it) for _ in range(3)]
    restored = _iterator(examples).restore(state)
    assert all(_equal(x, y) for x, y in zip(following, [next(restored) for _ in range(3)]))
    # a fresh iterator reproduces the whole uninterrupted stream
    again = _iterator(examples)
    assert all(_equal(x, next(again)) for x in batches + following)
    with pytest.raises(ValueError, match="seed"):
        _iterator(examples, seed=4).restore(state)
    with pytest.raises(ValueError, match="'batch_size'"):
        sft.SFTBatches(examples, seq_len=32, batch_size=3, seed=3).restore(state)
    with pytest.raises(ValueError, match="offset"):
        _iterator(examples).restore({**state, "offset": 11})


def test_iterator_epochs_are_permutations(examples):
    it = _iterator(examples, seed=5, num_epochs=2)
    per_epoch = {0: [], 1: []}
    for b in it:
        epoch = it.state()["epoch"]  # batches never span epochs
        for r in range(2):
            for s in range(1, b["segment_ids"][r].max() + 1):
                idx = b["segment_ids"][r] == s
                per_epoch[epoch].append(tuple(b["inputs"][r][idx].tolist()))
    full = sorted(tuple(np.concatenate([p, c])[:-1].tolist()) for p, c in examples)
    assert sorted(per_epoch[0]) == full and sorted(per_epoch[1]) == full
    assert per_epoch[0] != per_epoch[1]  # a new permutation each epoch
    ordered = [b for b in _iterator(examples, seed=None, shuffle=False, num_epochs=1)]
    assert all(_equal(x, y) for x, y in zip(ordered, sft.pack(examples, 32, 2)[0]))


def test_iterator_seed_reproducibility(examples):
    a, b, c = _iterator(examples, seed=1), _iterator(examples, seed=1), _iterator(examples, seed=2)
    first = [next(a) for _ in range(5)]
    assert all(_equal(x, next(b)) for x in first)
    assert not all(_equal(x, next(c)) for x in first)
    with pytest.raises(ValueError, match="seed=None"):
        _iterator(examples, seed=None)


# ---------------------------------------------------------------- JSONL rows


@pytest.mark.parametrize("line,field", [
    ('{"prompt": "p"}', "'response'"),
    ('{"prompt": "p", "response": 3}', "'response'"),
    ('{"prompt": "  ", "response": "r"}', "'prompt'"),
    ('{"messages": [{"role": "user", "content": "p"}]}', "'messages'"),
    ('{"messages": [{"role": "user", "content": "p"}, {"role": "assistant"}]}',
     "'messages\\[1\\].content'"),
    ('{"messages": [{"role": "assistant", "content": "a"}, {"role": "user", "content": "p"}]}',
     "'messages\\[1\\].role'"),
    ('{"id": true, "prompt": "p", "response": "r"}', "'id'"),
    ('{"id": "r0", "prompt": "p", "response": "r"}', "duplicate id"),
    ('[1, 2]', "JSON object"),
    ('{"prompt": "p", "response": "r"', "invalid JSON"),
])
def test_bad_rows_name_file_line_field(tmp_path, line, field):
    path = tmp_path / "train.jsonl"
    _write(path, [{"id": "r0", "prompt": "p", "response": "r"}, "", line])
    with pytest.raises(ValueError, match=f"{path}:3: .*{field}"):
        chat_traces.read_rows(path)


def test_held_out_split_is_deterministic(tmp_path):
    rows = _rows(200)
    _write(tmp_path / "train.jsonl", rows)
    splits = chat_traces.split_rows(tmp_path, validation_fraction=0.25)
    held = {r["id"] for r in splits["validation"]}
    assert len(splits["train"]) + len(held) == 200 and 30 <= len(held) <= 70
    assert held == {r["id"] for r in rows if chat_traces.in_validation(r["id"], 0.25)}
    # reordering and appending rows leave each row's assignment unchanged
    other = tmp_path / "other"
    other.mkdir()
    _write(other / "train.jsonl", rows[::-1] + _rows(50, start=200))
    held2 = {r["id"] for r in chat_traces.split_rows(other, 0.25)["validation"]}
    assert held2 & {r["id"] for r in rows} == held
    assert {r["id"] for r in chat_traces.split_rows(tmp_path, 0.25, holdout_seed=1)
            ["validation"]} != held
    assert list(chat_traces.split_rows(tmp_path, 0.0)) == ["train"]
    with pytest.raises(ValueError, match="validation_fraction=1.0"):
        chat_traces.split_rows(tmp_path, 1.0)


# ---------------------------------------------------------------- TFDS builder and seqio task


@pytest.fixture(scope="module")
def trace_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("traces")
    with_val, held = root / "with_val", root / "held"
    with_val.mkdir()
    held.mkdir()
    rows = _rows(8)
    rows[3] = {"prompt": "no id", "response": "ok"}  # default id "train-3"
    _write(with_val / "train.jsonl", rows[:6])
    _write(with_val / "validation.jsonl", rows[6:])
    _write(held / "train.jsonl", rows)
    return {"with_val": str(with_val), "held": str(held), "tfds": str(root / "tfds")}


def _decoded(ds):
    return [{"id": ex["id"].decode(), "prompt_messages": json.loads(ex["prompt_messages"]),
             "response": ex["response"].decode()} for ex in ds.as_numpy_iterator()]


@pytest.mark.slow
def test_tfds_builder_and_seqio_task_match_rows(trace_dirs):
    import tensorflow_datasets as tfds

    from prd_jax.data.vocab import HFVocabulary

    tfds.display_progress_bar(False)
    all_rows = {}
    for key, fraction in (("with_val", 0.05), ("held", 0.3)):
        rows = all_rows[key] = chat_traces.split_rows(trace_dirs[key], validation_fraction=fraction)
        assert set(rows) == {"train", "validation"} and rows["validation"]
        built = chat_traces.build(f"sft_{key}", trace_dirs[key], tfds_dir=trace_dirs["tfds"],
                                  validation_fraction=fraction)
        assert {s: _decoded(ds) for s, ds in built.items()} == rows
        name = chat_traces.register_chat_task(f"sft_{key}", trace_dirs[key],
                                              HFVocabulary(VOCAB), tfds_dir=trace_dirs["tfds"],
                                              validation_fraction=fraction)
        for split, split_rows in rows.items():
            got = sft.examples_from_task(name, split)
            want = sft.examples_from_rows(VOCAB, split_rows)
            assert len(got) == len(want) == len(split_rows)
            for (gp, gc), (wp, wc) in zip(got, want):
                np.testing.assert_array_equal(gp, wp)
                np.testing.assert_array_equal(gc, wc)
    assert [len(r) for r in all_rows["with_val"].values()] == [6, 2]
    assert sum(len(r) for r in all_rows["held"].values()) == 8
    assert all_rows["with_val"]["train"][3] == {
        "id": "train-3", "prompt_messages": [{"role": "user", "content": "no id"}],
        "response": "ok"}
    # the iterator reads a task directly
    it = sft.SFTBatches(name, split="validation", seq_len=32, batch_size=2, seed=None,
                        shuffle=False, num_epochs=1)
    assert it.num_examples == len(rows["validation"])
    assert sum(float(b["weights"].sum()) for b in it) == sum(
        c.size for _, c in sft.examples_from_rows(VOCAB, rows["validation"]))
