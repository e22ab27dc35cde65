"""Thinking blocks (ours; the PDR and V1 papers are silent): the chat template's
`enable_thinking` switch as a model config field, and quoted candidates without their
`<think>...</think>` block, cut in-graph on token ids (Qwen3-style single-token marker,
multi-token marker, no marker)."""

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tokenizers import AddedToken, decoders, models, pre_tokenizers
from tokenizers import Tokenizer as RustTokenizer

from prd_jax.model.config import get_model_config
from prd_jax.model.tokenizer import Tokenizer, for_model
from prd_jax import prompts as P
from prd_jax.operators.calls import strip_thinking
from prd_jax.operators.runner import encode_problems, make_context, run_operator, thinking_marker
from prd_jax.operators.specs import Sampling
from prd_jax.operators.pdr import PDR
from prd_jax.operators.sr import SR
from prd_jax.operators.best_of_n import BestOfN
from prd_jax.sampling import SampleOutput
from fakes import CharTokenizer

# A Qwen3-style template: thinking is on unless `enable_thinking` is false, in which case
# the generation prompt carries an empty thinking block.
QWEN3_STYLE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}"
    "{% endif %}")


def byte_tokenizer(template=QWEN3_STYLE) -> Tokenizer:
    """Byte-level BPE without merges (one token per byte), plus Qwen3's added tokens."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    rust = RustTokenizer(models.BPE(vocab={c: i for i, c in enumerate(sorted(alphabet))}, merges=[]))
    rust.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    rust.decoder = decoders.ByteLevel()
    rust.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in ("<|im_start|>", "<|im_end|>")])
    rust.add_tokens([AddedToken(t, normalized=False, special=False) for t in ("<think>", "</think>")])
    return Tokenizer(rust, eos_id=rust.token_to_id("<|im_end|>"), pad_id=0, chat_template=template)


TOK = byte_tokenizer()
USER = [{"role": "user", "content": "2+2?"}]


# ----------------------------------------------------------------------------- enable_thinking


def test_enable_thinking_renders_as_the_template_says():
    on = TOK.apply_chat_template(USER)
    assert on == "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"
    off = TOK.with_chat_template_vars(enable_thinking=False)
    assert off.apply_chat_template(USER) == on + "<think>\n\n</think>\n\n"
    assert TOK.with_chat_template_vars(enable_thinking=True).apply_chat_template(USER) == on
    assert off.apply_chat_template(USER, enable_thinking=True) == on  # an explicit argument wins
    assert off.with_chat_template_vars(enable_thinking=None).apply_chat_template(USER) == on
    assert TOK.chat_template_vars == {}  # copies: the original is untouched
    assert off.encode_chat(USER) == TOK.encode(on + "<think>\n\n</think>\n\n")


def test_enable_thinking_is_a_model_config_field_that_reaches_the_operator_prompts():
    cfg = get_model_config("qwen3-8b", enable_thinking=False)
    assert get_model_config("qwen3-8b").enable_thinking is None
    assert for_model(TOK, get_model_config("qwen3-8b")) is TOK
    off = for_model(TOK, cfg)
    assert off.apply_chat_template(USER).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    solve_on = make_context(TOK, Sampling(), k_max=2).templates["solve"]
    solve_off = make_context(off, Sampling(), k_max=2).templates["solve"]
    tail = TOK.encode("<think>\n\n</think>\n\n")
    assert list(solve_off.pieces[-1]) == list(solve_on.pieces[-1]) + tail
    with pytest.raises(ValueError, match="ModelConfig.enable_thinking='no'; allowed: None, True, False"):
        get_model_config("qwen3-8b", enable_thinking="no")
    from prd_jax.data.synthetic import CharVocab

    assert for_model(CharVocab(), get_model_config("tiny")).__class__ is CharVocab
    with pytest.raises(ValueError, match="ModelConfig.enable_thinking=True needs a tokenizer with a Jinja"):
        for_model(CharVocab(), get_model_config("tiny", enable_thinking=True))


# ----------------------------------------------------------------------------- the marker


def test_thinking_marker_from_the_tokenizer():
    end, skip = thinking_marker(TOK)
    assert end == (TOK.token_to_id("</think>"),)  # one added token, as in Qwen3
    assert skip == (TOK.encode("\n")[0], TOK.encode(" ")[0])  # "\n\n" and "  " are two tokens here
    multi = CharTokenizer(template="...</think>...")
    assert thinking_marker(multi) == (tuple(multi.encode("</think>")), (multi.encode("\n")[0], multi.encode(" ")[0]))
    assert thinking_marker(CharTokenizer(template="no thinking here")) == ((), ())


def test_strip_thinking_hand_computed():
    m, nl = 9, 7  # marker id and a newline id
    tok = jnp.asarray([[1, 2, m, nl, 3, 4, 0],    # block then answer "3 4"
                       [5, 6, 0, 0, 0, 0, 0],     # no marker: kept
                       [1, m, 2, m, nl, nl, 8],   # two markers: cut after the last
                       [1, 2, m, 0, 0, 0, 0],     # marker at the end: nothing left
                       [1, 2, 3, m, 4, 0, 0]])    # marker past the row's length: kept
    lengths = jnp.asarray([6, 2, 7, 3, 3])
    out, new = strip_thinking(tok, lengths, (m,), (nl,))
    got = [np.asarray(out[r, :int(new[r])]).tolist() for r in range(5)]
    assert got == [[3, 4], [5, 6], [8], [], [1, 2, 3]]
    out, new = strip_thinking(tok, lengths, (m, nl))  # a two-token marker, nothing skipped
    got = [np.asarray(out[r, :int(new[r])]).tolist() for r in range(5)]
    assert got == [[3, 4], [5, 6], [nl, 8], [1, 2, m], [1, 2, 3]]
    same, length = strip_thinking(tok, lengths, ())
    assert same is tok and length is lengths


# ----------------------------------------------------------------------------- quoted candidates


@flax.struct.dataclass
class ScriptLM:
    """Output row j of every call (prompt row x sample) is script row j mod S, cut at max_new."""

    table: jax.Array  # [S, W]
    lengths: jax.Array  # [S]

    def generate(self, prompts, lengths, keys, scfg, fanout=True, name="", live=None):
        rows = prompts.shape[0] * scfg.num_samples
        pick = jnp.arange(rows) % self.table.shape[0]
        width = scfg.max_new_tokens
        table = jnp.pad(self.table, ((0, 0), (0, max(0, width - self.table.shape[1]))))[:, :width]
        n = jnp.minimum(self.lengths[pick], width)
        return SampleOutput(table[pick], jnp.zeros((rows, width)), n, jnp.zeros((rows,), bool))

    def next_logits(self, prompts, lengths, name="", live=None):
        return jnp.zeros((prompts.shape[0], 512))


def script(tok, texts, end=()):
    rows = [tok.encode(t) + list(end) for t in texts]
    width = max(len(r) for r in rows)
    table = np.zeros((len(rows), width), np.int32)
    for i, r in enumerate(rows):
        table[i, :len(r)] = r
    return ScriptLM(jnp.asarray(table), jnp.asarray([len(r) for r in rows], jnp.int32))


def run(tok, lm, spec, k_max=2):
    ctx = make_context(tok, Sampling(stop_ids=tuple(getattr(tok, "stop_ids", ()))), kappa=32, k_max=k_max)
    probs = encode_problems(tok, ["2+2?"], ["4"], max_problem_tokens=16)[0]
    return run_operator(lm, probs, jax.random.key(0), spec, ctx)


def workspace(res):
    row = np.asarray(res.workspace_tokens[0]).tolist()
    return row[len(row) - int(res.workspace_lengths[0]):]


THOUGHT = "<think>abc</think>\n\nanswer"


@pytest.mark.parametrize("quote_thinking,expected", [(False, "answer"), (True, THOUGHT)])
def test_sr_quotes_the_answer_after_the_thinking_block(quote_thinking, expected):
    lm = script(TOK, [THOUGHT], end=[TOK.eos_id])  # ends with <|im_end|>, a stop token
    res = run(TOK, lm, SR(1, False, 32, 32, 8, quote_thinking=quote_thinking))
    assert workspace(res) == TOK.encode(expected)
    assert int(res.b_seq[0]) == 2 * len(lm.table[0])  # generated tokens count in full either way


def test_a_candidate_without_a_closing_marker_is_quoted_as_it_is():
    for text in ("plain answer", "<think>ran out of budget"):
        res = run(TOK, script(TOK, [text]), SR(1, False, 32, 32, 8))
        assert workspace(res) == TOK.encode(text)


def test_truncation_applies_to_the_part_after_the_block():
    # "answer" (6 tokens) capped at 4, head 2: "an" + "er"; the 13-token thought is not counted
    res = run(TOK, script(TOK, [THOUGHT]), SR(1, False, 32, 4, 2))
    assert workspace(res) == TOK.encode("aner") and int(res.truncations[0]) == 1


@pytest.mark.slow
def test_pdr_workspace_and_summary_are_quoted_without_thinking():
    lm = script(TOK, [THOUGHT, "plain"])  # draft 0 thinks, draft 1 does not
    res = run(TOK, lm, PDR((2, 1), "shared_topk", 2, "random", 32, 32, 32, 8))
    entry = lambda j, text: (TOK.encode(P.CANDIDATE_HEADER.format(index=j)) + TOK.encode(text)  # noqa: E731
                             + TOK.encode(P.CANDIDATE_FOOTER))
    assert workspace(res) in (entry(1, "answer") + entry(2, "plain"), entry(1, "plain") + entry(2, "answer"))
    # the global summary call writes THOUGHT too (output row 0): the refine prompt quotes "answer"
    res = run(TOK, lm, PDR((2, 1), "global_summary", 2, "random", 32, 32, 32, 8))
    assert workspace(res) == TOK.encode("answer")
    res = run(TOK, lm, PDR((2, 1), "global_summary", 2, "random", 32, 32, 32, 8, quote_thinking=True))
    assert workspace(res) == TOK.encode(THOUGHT)


def test_judges_quote_candidates_without_thinking():
    """A pointwise judge's prompt quotes the candidate after its block: in_tokens differ by
    the block's length (13 tokens of '<think>abc</think>\\n\\n' -> 7 ids: 1 + 3 + 1 + 2)."""
    lm = script(TOK, [THOUGHT, THOUGHT])
    short = run(TOK, lm, BestOfN(2, "self_pointwise", 32, 32, 8))
    full = run(TOK, lm, BestOfN(2, "self_pointwise", 32, 32, 8, quote_thinking=True))
    rating = [i for i, n in enumerate(short.calls.names) if n == "rating"]
    block = len(TOK.encode("<think>abc</think>\n\n"))
    assert block == 7
    np.testing.assert_array_equal(np.asarray(full.calls.in_tokens[0])[rating] - block,
                                  np.asarray(short.calls.in_tokens[0])[rating])
    assert "quote_thinking" in BestOfN(quote_thinking=True).label and "quote_thinking" not in BestOfN().label


def test_a_multi_token_marker_is_matched_in_graph():
    tok = CharTokenizer(template="... </think> ...")
    res = run(tok, script(tok, ["abc</think>\n answer"]), SR(1, False, 32, 32, 8))
    assert workspace(res) == tok.encode("answer")
    res = run(CharTokenizer(), script(tok, ["abc</think>answer"]), SR(1, False, 32, 32, 8))
    assert workspace(res) == tok.encode("abc</think>answer")  # no thinking in the template: kept


# ----------------------------------------------------------------------------- graded text


def test_graded_text_is_the_answer_after_the_thinking_block():
    """`answer_texts` (eval and RL grade on it): the text after the last `</think>` when the row
    has one, the whole row when not; so a boxed value in the reasoning does not decide the grade."""
    from prd_jax.operators.runner import answer_texts
    from prd_jax.tasks import get_task

    rows = ["<think>maybe \\boxed{5}</think>\n\nSo \\boxed{7}", "no block: \\boxed{5}",
            "<think>cut off at \\boxed{5}"]
    ids = [TOK.encode(t) for t in rows]
    width = max(map(len, ids)) + 3
    tokens = np.zeros((len(ids), width), np.int32)
    for r, row in enumerate(ids):
        tokens[r, :len(row)] = row
    texts = answer_texts(TOK, tokens, [len(x) for x in ids])
    assert texts == ["So \\boxed{7}", "no block: \\boxed{5}", "<think>cut off at \\boxed{5}"]
    grades = get_task("gsm8k").grade_many([{"answer": "7"}, {"answer": "5"}, {"answer": "5"}], texts)
    assert [g["correct"] for g in grades] == [True, True, True]
    assert not get_task("gsm8k").grade({"answer": "5"}, texts[0])["correct"]  # the reasoning's 5 is not graded
    # without a marker in the vocabulary or template, rows are decoded whole
    plain = CharTokenizer(template="no thinking here")
    row = plain.encode("a</think>b")
    assert answer_texts(plain, np.asarray([row]), [len(row)]) == ["a</think>b"]
