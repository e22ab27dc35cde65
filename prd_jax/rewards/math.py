"""Math answer extraction and equivalence grading.

Used as the verifiable reward / accuracy metric for math tasks in PDR
(arXiv 2510.01123) and V1 (arXiv 2603.04304).

Public API: :func:`extract_answer`, :func:`normalize_answer`,
:func:`is_equivalent`, :func:`grade`, :func:`grade_detailed`.

Comparison pipeline of :func:`is_equivalent` (first decisive step wins):

1. both sides normalised (:func:`normalize_answer`); identical -> True;
2. multiple-choice letters (``(B)``, ``B``, ``\\text{(B)}``) -> letter compare;
3. both plain integers -> exact digit compare (no sympy);
4. both plain numbers (decimal, ``a/b``, ``\\frac{a}{b}``, mixed number) ->
   exact rational compare with relative tolerance ``1e-6`` (decisive);
5. text answers -> case-insensitive compare (decisive for words);
6. otherwise ``math_verify`` (``parse`` + ``verify``) in a guarded worker
   process with a per-call timeout.

Semantics chosen where LaTeX is ambiguous:

* mixed numbers: an integer directly followed by a *proper* fraction
  (``2\\frac{1}{2}``, ``2 1/2``) is the mixed number 5/2, as in competition
  math; ``2\\frac{3}{2}`` (improper fraction) keeps its product meaning, 3
  (rewritten to ``2\\cdot\\frac{3}{2}``, as math_verify alone would read 3.5).
* percent: ``50\\%`` equals both ``50`` and ``0.5``; the ``/100`` reading is
  only tried when exactly one side carries a percent sign.
* ``x = 5`` equals ``5`` (a single-variable left-hand side is dropped).
* a set ``\\{1,2\\}`` never equals a tuple/interval ``(1,2)``.

Timeout: ``math_verify``'s own timeouts use ``signal.alarm`` and only work on
the main thread, and even there a signal cannot interrupt a long C-level
computation (e.g. the big-integer power in ``9^{9^{9^9}}``). So symbolic
checks run in a small pool of persistent worker processes
(``rewards.pool.WorkerPool``, the subprocess module shared with the code
rewards; ``python -c <worker>``, JSON lines over pipes,
math_verify timeouts disabled inside). The caller waits for the reply with ``poll`` for ``timeout_s``
seconds; on expiry the worker is SIGKILLed, a replacement is started in the
background and the comparison counts as False. This works from any thread,
never blocks on a stuck computation, and the worker's address space is capped
(``RLIMIT_AS``). Worker start-up (~1 s, importing sympy) is not counted in
``timeout_s``. Where a worker cannot run (non-POSIX, no interpreter path, or
``timeout_s`` is None/<=0) math_verify runs in-process, guarded by
``signal.setitimer`` on the main thread and unguarded elsewhere.
"""

from __future__ import annotations

import logging
import re
import signal
import threading
from collections import OrderedDict
from fractions import Fraction

from prd_jax.rewards.pool import WorkerPool, WorkerUnavailable

__all__ = [
    "extract_answer",
    "normalize_answer",
    "is_equivalent",
    "grade",
    "grade_detailed",
]

# --------------------------------------------------------------------------
# Brace matching
# --------------------------------------------------------------------------


def _match_brace(s: str, open_idx: int) -> int:
    """Index of the ``}`` closing the ``{`` at ``open_idx``, or -1 (escapes skipped)."""
    close = _brace_pairs(s[open_idx:]).get(0)
    return -1 if close is None else open_idx + close


# --------------------------------------------------------------------------
# Extraction
# --------------------------------------------------------------------------

_BOXED_RE = re.compile(r"\\(?:boxed|fbox)(?![a-zA-Z])")
_ANSWER_RE = re.compile(
    r"final\s+answer\**\s*(?:is|:)|\bthe\s+answer\s+is|\banswer\**\s*:",
    re.IGNORECASE,
)
_GSM8K_RE = re.compile(r"^[ \t]*####(.*)$", re.MULTILINE)
_TOKEN_RE = re.compile(r"[^\s$\\{}]+")
_MAX_PHRASE_CHARS = 2000
_NUMBER_RE = re.compile(
    r"(?<![\w.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+(?:\.\d+)?)?(?![\w])"
)


def _brace_pairs(s: str) -> dict[int, int]:
    """Map each balanced ``{`` index to its ``}`` (one linear pass)."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            stack.append(i)
        elif c == "}" and stack:
            pairs[stack.pop()] = i
        i += 1
    return pairs


def _boxed_content(text: str, start: int, pairs: dict[int, int]) -> str | None:
    """Content of the ``\\boxed``/``\\fbox`` whose name ends at ``start``."""
    i, n = start, len(text)
    while i < n and text[i] in " \t":
        i += 1
    if i >= n:
        return None
    if text[i] == "{":
        j = pairs.get(i, -1)
        if j < 0:
            return None
        content = text[i + 1:j].strip()
    else:  # ``\boxed 5`` / ``\boxed5``: one TeX token
        m = _TOKEN_RE.match(text, i)
        if not m:
            return None
        content = m.group(0).rstrip(".,;")
    return content or None


def _answer_phrase(text: str) -> str | None:
    """Answer after the last "final answer is" / "the answer is" / "Answer:"."""
    matches = list(_ANSWER_RE.finditer(text))[-16:]
    for m in reversed(matches):
        nl = text.find("\n", m.end(), m.end() + _MAX_PHRASE_CHARS)
        rest = text[m.end():nl if nl >= 0 else m.end() + _MAX_PHRASE_CHARS]
        rest = rest.lstrip(" \t*:").strip()
        if not rest:
            continue
        ans = None
        for opener, closer in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
            if rest.startswith(opener):
                end = rest.find(closer, len(opener))
                if end > len(opener):
                    ans = rest[len(opener):end]
                break
        if ans is None:
            cut = re.search(r"\.(?=\s|$)", rest)
            ans = rest[: cut.start()] if cut else rest
        ans = ans.strip().strip("$*").strip().rstrip(".").strip()
        if ans:
            return ans
    return None


def extract_answer(text: str, *, last_number_fallback: bool = True) -> str | None:
    """Extract the final answer from a model response.

    Priority: last well-formed ``\\boxed{..}`` / ``\\fbox{..}`` (also
    ``\\boxed 5``, nested braces ok); "final answer is ..." / "The answer
    is ..." / "Answer: ..." (rest of the line or sentence, ``$`` and trailing
    period stripped); a GSM8K ``#### n`` line; the last number in the text (if
    ``last_number_fallback``). Returns None when nothing is found; never raises.
    """
    try:
        if not isinstance(text, str) or not text:
            return None
        starts = [m.end() for m in _BOXED_RE.finditer(text)]
        pairs = _brace_pairs(text) if starts else {}
        for start in reversed(starts):
            content = _boxed_content(text, start, pairs)
            if content is not None:
                return content
        ans = _answer_phrase(text)
        if ans:
            return ans
        gsm = [m.group(1).strip() for m in _GSM8K_RE.finditer(text)]
        gsm = [g for g in gsm if g]
        if gsm:
            return gsm[-1].strip()
        if last_number_fallback:
            nums = _NUMBER_RE.findall(text)
            if nums:
                return nums[-1]
        return None
    except Exception:  # noqa: BLE001 - never raise
        return None


# --------------------------------------------------------------------------
# Normalisation
# --------------------------------------------------------------------------

_UNITS_MULTI = (
    "mm|cm|km|m2|cm2|km2|meters?|metres?|centimeters?|centimetres?|millimeters?|"
    "millimetres?|kilometers?|kilometres?|inch|inches|ft|foot|feet|yards?|yd|"
    "miles?|mi|kg|mg|grams?|kilograms?|lbs?|pounds?|oz|ounces?|liters?|litres?|"
    "ml|gallons?|dollars?|cents?|usd|euros?|hours?|hrs?|minutes?|mins?|seconds?|"
    "secs?|days?|weeks?|months?|years?|units?|degrees?|deg|radians?|mph|kph|"
    "km/h|m/s|sq\\.?\\s*units?|square\\s+units?"
)
_UNITS_SINGLE = "m|s|g|l|h|L"
_UNIT_WORD_RE = re.compile(
    rf"(?:(?:square|sq\.?|cubic|cu\.?)\s*)?(?:{_UNITS_MULTI}|{_UNITS_SINGLE})",
    re.IGNORECASE,
)
_TRAILING_UNIT_RE = re.compile(
    rf"(?<=[\d}}).])\s*(?:(?:square|sq\.?|cubic|cu\.?)\s+)?(?:{_UNITS_MULTI})"
    r"(?:\s*\^\s*\{?\s*[23]\s*\}?|[²³])?\s*$",
    re.IGNORECASE,
)
_NUM_WORDS_RE = re.compile(
    r"([+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?)(?:\s+[A-Za-z]{3,})+"
)
_UNIT_POWER_RE = re.compile(r"\s*(?:\^\s*(?:\{\s*[23]\s*\}|[23])|[²³])")
_TEXT_CMD_RE = re.compile(
    r"\\(?:text|textbf|textit|textrm|textsf|texttt|textnormal|textup|mathrm|"
    r"mathbf|mathit|mathsf|mathtt|mathnormal|mbox|hbox|boxed|fbox)\s*\{"
)
_SPACING_RE = re.compile(r"\\\\|\\[,!;: ]|\\q?quad(?![a-zA-Z])")
_DEGREE_RE = re.compile(
    r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ(?![a-zA-Z])|\^\s*\{?\s*\\degree\s*\}?|"
    r"\\degree(?![a-zA-Z])|°"
)
_VAR_ASSIGN_RE = re.compile(
    r"^(?:[a-zA-Z]|\\[a-zA-Z]+)(?:_\{?[a-zA-Z0-9]+\}?)?=(?P<rest>.+)$"
)
_RELATION_RE = re.compile(r"[=<>]|\\(?:le|ge|leq|geq|neq|ne|lt|gt)(?![a-zA-Z])")
_THOUSANDS_RE = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_MIXED_RE = re.compile(r"([+-]?)(\d+)\\frac\{(\d+)\}\{(\d+)\}")
_MIXED_SPACE_RE = re.compile(r"([+-]?\d+)\s+(\d+)\s*/\s*(\d+)")


def _unwrap_text(s: str) -> str:
    """Replace ``\\text{..}``-like wrappers (and ``\\boxed``) by their content.

    A wrapped unit word after a number (``5\\text{ cm}``, ``3\\mathrm{m}^2``)
    is dropped entirely, power included.
    """
    for _ in range(8):
        out: list[str] = []
        tail = ""  # last non-blank characters emitted so far
        i = 0
        changed = False
        while True:
            m = _TEXT_CMD_RE.search(s, i)
            if not m:
                out.append(s[i:])
                break
            j = _match_brace(s, m.end() - 1)
            if j < 0:
                out.append(s[i:])
                break
            seg = s[i:m.start()]
            out.append(seg)
            if seg.strip():
                tail = (tail + seg).rstrip()[-8:]
            inner = s[m.end():j]
            i = j + 1
            changed = True
            prev = tail
            if (prev and prev[-1] in "0123456789}).\\" or prev.endswith("\\pi")) and \
                    _UNIT_WORD_RE.fullmatch(inner.strip()):
                pw = _UNIT_POWER_RE.match(s, i)
                if pw:
                    i = pw.end()
                continue
            out.append(inner)
            if inner.strip():
                tail = (tail + inner).rstrip()[-8:]
        s = "".join(out)
        if not changed:
            break
    return s


def _normalize(s: str) -> tuple[str, bool]:
    """Normalise ``s``; returns ``(normalised, had_percent_sign)``."""
    if not isinstance(s, str):
        return "", False
    s = s.replace("\u2212", "-")
    s = re.sub(r"\s+", " ", s).strip()  # single spaces keep later regexes linear
    for a, b in (("\\(", "\\)"), ("\\[", "\\]")):
        if s.startswith(a) and s.endswith(b) and len(s) >= 4:
            s = s[2:-2].strip()
    s = re.sub(r"\s+", " ", s.replace("\\$", " ").replace("$", " "))
    s = _unwrap_text(s)
    s = re.sub(r"\\(?:left|right|bigl|bigr|Bigl|Bigr|big|Big)(?![a-zA-Z])", "", s)
    s = re.sub(r"\\displaystyle(?![a-zA-Z])", "", s)
    s = _SPACING_RE.sub(lambda m: m.group(0) if m.group(0) == "\\\\" else " ", s)
    s = re.sub(r"\s+", " ", s.replace("~", " "))
    s = re.sub(r"\\[dtc]frac(?![a-zA-Z])", r"\\frac", s)
    s = _DEGREE_RE.sub(" ", s)
    percent = bool(re.search(r"%", s))
    s = s.replace("\\%", " ").replace("%", " ")
    s = re.sub(r"\s+", " ", s).strip()
    s = re.sub(r" (?:or|and) ", ",", s)
    s = s.strip().rstrip(".").strip()
    m = _NUM_WORDS_RE.fullmatch(s)
    if m:  # "12 students" -> "12"
        s = m.group(1)
    for _ in range(3):
        new = _TRAILING_UNIT_RE.sub("", s).strip()
        if new == s or not new:
            break
        s = new
    m = _MIXED_SPACE_RE.fullmatch(s)
    if m:
        s = f"{m.group(1)}\\frac{{{m.group(2)}}}{{{m.group(3)}}}"
    # Remove whitespace, keeping one space between a command and a letter
    # (``\pi r`` must not become ``\pir``).
    s = re.sub(r"(\\[a-zA-Z]+)\s+(?=[a-zA-Z])", lambda m: m.group(1) + "\x00", s)
    s = re.sub(r"\s+", "", s).replace("\x00", " ")
    s = s.rstrip(".")
    m = _VAR_ASSIGN_RE.match(s)
    if m and not _RELATION_RE.search(m.group("rest")) and \
            not m.group(0).startswith(("\\frac", "\\sqrt")):
        s = m.group("rest")
    s = re.sub(r"(?<=\d)\{,\}(?=\d)", "", s)
    if _THOUSANDS_RE.fullmatch(s):
        s = s.replace(",", "")
    s = re.sub(r"\\frac(\d)(\d)", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\sqrt(\d)", r"\\sqrt{\1}", s)
    m = _MIXED_RE.fullmatch(s)
    if m:
        whole, num, den = int(m.group(2)), int(m.group(3)), int(m.group(4))
        sign = "-" if m.group(1) == "-" else ""
        if 0 < num < den:  # mixed number
            s = f"{sign}\\frac{{{whole * den + num}}}{{{den}}}"
        else:  # improper fraction: a product, made explicit for math_verify
            s = f"{sign}{whole}\\cdot\\frac{{{num}}}{{{den}}}"
    return s, percent


def normalize_answer(s: str) -> str:
    """Canonical string form of an answer (see module docstring).

    Strips ``\\text{}``-like wrappers (keeping content), ``$``/``\\$``, percent
    signs, degrees, trailing unit words after a number, ``\\left``/``\\right``,
    TeX spacing, whitespace, trailing period, thousands separators and a
    leading ``x =``; maps ``\\dfrac``/``\\tfrac`` to ``\\frac`` and mixed numbers
    to improper fractions. Non-str input gives ``""``; never raises.
    """
    try:
        return _normalize(s)[0]
    except Exception:  # noqa: BLE001
        return ""


# --------------------------------------------------------------------------
# Cheap comparisons
# --------------------------------------------------------------------------

_INT_RE = re.compile(r"[+-]?\d+")
_DEC = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)"
_DEC_RE = re.compile(_DEC)
_SCI_RE = re.compile(rf"{_DEC}[eE][+-]?\d{{1,3}}")
_SLASH_RE = re.compile(rf"({_DEC})/({_DEC})")
_FRAC_RE = re.compile(rf"([+-]?)\\frac\{{({_DEC})\}}\{{({_DEC})\}}")
_MC_RE = re.compile(r"\(([A-Ja-j])\)|([A-J])\)?|\[([A-J])\]")
_MC_PREFIX_RE = re.compile(r"\(([A-J])\)")
_WORD_RE = re.compile(r"[A-Za-z]{3,}")
_REL_TOL = 1e-6
_MAX_NUM_CHARS = 400


def _to_fraction(s: str) -> Fraction | None:
    """Exact value of a plain numeric string, or None."""
    if not s or len(s) > _MAX_NUM_CHARS:
        return None
    try:
        if _DEC_RE.fullmatch(s) or _SCI_RE.fullmatch(s):
            return Fraction(s)
        m = _SLASH_RE.fullmatch(s)
        if m:
            den = Fraction(m.group(2))
            return Fraction(m.group(1)) / den if den else None
        m = _FRAC_RE.fullmatch(s)
        if m:
            den = Fraction(m.group(3))
            if not den:
                return None
            val = Fraction(m.group(2)) / den
            return -val if m.group(1) == "-" else val
    except (ValueError, ZeroDivisionError, OverflowError):
        return None
    return None


def _canon_int(s: str) -> str:
    neg = s.startswith("-")
    digits = s.lstrip("+-").lstrip("0") or "0"
    return ("-" if neg and digits != "0" else "") + digits


def _close(a: Fraction, b: Fraction) -> bool:
    if a == b:
        return True
    return abs(a - b) <= Fraction(_REL_TOL) * max(abs(a), abs(b))


def _mc_letter(s: str, *, allow_prefix: bool = False) -> str | None:
    m = _MC_RE.fullmatch(s)
    if m:
        return next(g for g in m.groups() if g).upper()
    if allow_prefix:
        m = _MC_PREFIX_RE.match(s)
        if m:
            return m.group(1)
    return None


def _container(s: str) -> str | None:
    if s.startswith("\\{") and s.endswith("\\}"):
        return "set"
    if s[:1] in "([" and s[-1:] in ")]" and "," in s:
        return "seq"
    return None


# --------------------------------------------------------------------------
# Symbolic comparison (math_verify) with a process-based timeout
# --------------------------------------------------------------------------

_WORKER_SRC = r"""
import sys
sys.path[:] = [p for p in sys.path if p not in ("", ".")]
import json, logging, os, signal
try:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
except Exception:
    pass
try:
    import resource
    lim = int(sys.argv[1])
    if lim > 0:
        resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
except Exception:
    pass
logging.disable(logging.CRITICAL)
out = os.fdopen(os.dup(1), "w")
devnull = os.open(os.devnull, os.O_WRONLY)
os.dup2(devnull, 1)
try:
    from math_verify import parse, verify
    ok = True
except Exception:
    ok = False
out.write(json.dumps({"ready": ok}) + "\n")
out.flush()
for line in sys.stdin:
    try:
        req = json.loads(line)
        g = parse("$" + req["g"] + "$", parsing_timeout=None)
        p = parse("$" + req["p"] + "$", parsing_timeout=None)
        res = bool(g) and bool(p) and bool(verify(g, p, timeout_seconds=None))
    except BaseException:
        res = False
    out.write(json.dumps({"r": res}) + "\n")
    out.flush()
"""

_WORKER_MEM_BYTES = 4 << 30
_MAX_IDLE_WORKERS = 8
_MAX_SYMBOLIC_CHARS = 1000
_MAX_ANSWER_CHARS = 20_000

# One pool of math_verify workers (rewards.pool: the subprocess machinery shared with code).
_POOL = WorkerPool(_WORKER_SRC, (_WORKER_MEM_BYTES,), max_idle=_MAX_IDLE_WORKERS, startup_timeout_s=60.0)
_WorkerUnavailable = WorkerUnavailable
_WORKERS_BROKEN = False
_CACHE_LOCK = threading.Lock()
_CACHE: OrderedDict[tuple[str, str], bool] = OrderedDict()
_CACHE_MAX = 65536


class _SignalTimeout(BaseException):
    pass


def _verify_inprocess(gold: str, pred: str, timeout_s: float | None) -> bool:
    """math_verify in this process; SIGALRM-guarded only on the main thread."""
    try:
        from math_verify import parse, verify
    except Exception:  # noqa: BLE001
        return False
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)

    def run() -> bool:
        g = parse("$" + gold + "$", parsing_timeout=None)
        p = parse("$" + pred + "$", parsing_timeout=None)
        return bool(g) and bool(p) and bool(verify(g, p, timeout_seconds=None))

    use_alarm = (timeout_s is not None and timeout_s > 0 and hasattr(signal, "setitimer")
                 and threading.current_thread() is threading.main_thread())
    if not use_alarm:
        return run()

    def handler(signum, frame):
        raise _SignalTimeout()

    old = signal.signal(signal.SIGALRM, handler)
    try:
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
        return run()
    except _SignalTimeout:
        return False
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _symbolic_equal(gold: str, pred: str, timeout_s: float | None) -> bool:
    """math_verify equivalence under a timeout; cached, False on timeout."""
    global _WORKERS_BROKEN
    key = (gold, pred)
    with _CACHE_LOCK:
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
    result: bool | None
    if timeout_s is None or timeout_s <= 0 or _WORKERS_BROKEN:
        result = _verify_inprocess(gold, pred, timeout_s)
    else:
        try:
            reply = _POOL.call({"g": gold, "p": pred}, timeout_s)
            result = None if reply is None else bool(reply.get("r"))
        except WorkerUnavailable:
            _WORKERS_BROKEN = True
            result = _verify_inprocess(gold, pred, timeout_s)
    if result is None:  # timed out: not cached
        return False
    with _CACHE_LOCK:
        _CACHE[key] = result
        if len(_CACHE) > _CACHE_MAX:
            _CACHE.popitem(last=False)
    return result


# --------------------------------------------------------------------------
# Public comparison API
# --------------------------------------------------------------------------


def _is_equivalent(pred: str, gold: str, timeout_s: float | None) -> bool:
    if len(pred) > _MAX_ANSWER_CHARS or len(gold) > _MAX_ANSWER_CHARS:
        return False  # no real answer is this long; keeps the cost bounded
    p, p_pct = _normalize(pred)
    g, g_pct = _normalize(gold)
    if not p or not g:
        return False
    if p == g:
        return True
    g_mc = _mc_letter(g)
    if g_mc is not None:
        p_mc = _mc_letter(p, allow_prefix=True)
        if p_mc is not None:
            return p_mc == g_mc
    if p_pct == g_pct and _INT_RE.fullmatch(p) and _INT_RE.fullmatch(g):
        return _canon_int(p) == _canon_int(g)
    a, b = _to_fraction(p), _to_fraction(g)
    if a is not None and b is not None:
        cands_a = (a, a / 100) if p_pct and not g_pct else (a,)
        cands_b = (b, b / 100) if g_pct and not p_pct else (b,)
        return any(_close(x, y) for x in cands_a for y in cands_b)
    if p.casefold() == g.casefold():
        return True
    if _WORD_RE.fullmatch(p) or _WORD_RE.fullmatch(g):
        return False  # words are text, not products of symbols
    kp, kg = _container(p), _container(g)
    if kp and kg and kp != kg:
        return False
    if len(p) > _MAX_SYMBOLIC_CHARS or len(g) > _MAX_SYMBOLIC_CHARS:
        return False
    return _symbolic_equal(g, p, timeout_s)


def is_equivalent(pred: str | None, gold: str, *, timeout_s: float | None = 2.0) -> bool:
    """Whether answer ``pred`` is mathematically equivalent to ``gold``.

    Integers, plain numbers, multiple-choice letters and text are decided
    without sympy; everything else goes to ``math_verify`` with a
    ``timeout_s`` wall-clock limit (None/<=0: in-process, no worker). See the
    module docstring. Never raises: None, garbage, errors and timeouts give
    False.
    """
    try:
        if not isinstance(pred, str) or not isinstance(gold, str):
            return False
        return _is_equivalent(pred, gold, timeout_s)
    except Exception:  # noqa: BLE001
        return False


def grade_detailed(response: str, gold: str, *, last_number_fallback: bool = True,
                   timeout_s: float | None = 2.0) -> dict:
    """Extract and compare; returns ``dict(answer=, correct=, parsed=)``.

    ``parsed`` is False when no answer could be extracted (``answer`` None).
    """
    answer = extract_answer(response, last_number_fallback=last_number_fallback)
    correct = answer is not None and is_equivalent(answer, gold, timeout_s=timeout_s)
    return {"answer": answer, "correct": bool(correct), "parsed": answer is not None}


def grade(response: str, gold: str, **kw) -> bool:
    """Whether ``response``'s extracted final answer equals ``gold``.

    Keyword arguments: ``last_number_fallback`` and ``timeout_s``.
    """
    return grade_detailed(response, gold, **kw)["correct"]
