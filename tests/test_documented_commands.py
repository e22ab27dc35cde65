"""Every documented `--config.x=v` and `--config FILE:ARG` resolves (DESIGN principle 10).

Scanned: README.md, docs/*.md (not docs/results/: dated records), the text of every config
file under configs/ (docstring and comments) and the `prd-jax` docstring and help epilogs
(`cli.OVERRIDE_EXAMPLES`). Continuation lines (`\\`) are joined.

- A command is a `prd-jax SUBCOMMAND ...` in a fenced block or an inline code span (in a
  config file: any line), or a launch line (`launch/...` with a `configs/...py[:ARG]`).
  `eval`, `train`, `compile` and `demo` commands go through the real parser
  (`cli.build_parser`); their config (demo: configs/demo.py by default) is loaded, the
  overrides applied and the result validated as the command validates it before loading a
  model (`config_check.load` + `config_check.validate`). A subcommand that takes no config
  is skipped when its line has no `--config`, and fails when it has one.
- A bare mention (`--config.x=v` or `--config.x` outside a command) belongs to the config
  file it is written in; in README/docs, to the config named nearest to it in the same
  paragraph; when the paragraph names none, to every config whose schema declares the field
  (at least one must). With a value it is applied and validated; without one (or with a
  placeholder value: `...`, `<...>`, `$(...)`, an UPPER-CASE word) the field must exist. A
  key that moved (`config_io.MOVED`) must fail naming its new place; `--config.x` is the
  docs' placeholder for any field.
Paths are relative to the repository root. Nothing loads a model or compiles.
"""

from __future__ import annotations

import functools
import os
import re
import runpy
import shlex

import pytest

from prd_jax import cli, config_check, config_schema
from prd_jax.config_io import apply_overrides
from prd_jax.config_schema import MOVED

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG_COMMANDS = ("eval", "train", "compile", "demo")
FENCE = re.compile(r"^```[\w-]*\n(.*?)^```$", re.S | re.M)
SPAN = re.compile(r"`([^`\n]+)`")
MENTION = re.compile(r"--config\.([A-Za-z_][\w.]*)(?:=([^\s`'\"\\]*))?")
CONFIG_PATH = re.compile(r"configs/[\w/]+\.py(?::[\w.,-]+)?")
SEPARATORS = ("&&", "||", ";", "|", "&")


def _rel(path):
    return os.path.relpath(path, ROOT)


def sources() -> list:
    """(name, text, markdown) of every scanned text."""
    pages = [os.path.join(ROOT, "README.md")] + sorted(
        os.path.join(ROOT, "docs", f) for f in os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md"))
    configs = sorted(os.path.join(d, f) for d, _, files in os.walk(os.path.join(ROOT, "configs"))
                     for f in files if f.endswith(".py") and f != "__init__.py")
    out = [(_rel(p), open(p).read(), True) for p in pages] + [(_rel(p), open(p).read(), False) for p in configs]
    help_text = "\n\n".join(line for lines in cli.OVERRIDE_EXAMPLES.values() for line in lines)
    return out + [("prd_jax/cli.py (docstring, help epilogs)", cli.__doc__ + "\n\n" + help_text, False)]


# ------------------------------------------------------------------- extraction


def units(text: str, markdown: bool) -> list:
    """(paragraph, kind, text) with kind "code" (a fenced line, an inline span or, outside
    markdown, a line) or "prose"; a paragraph is a run of non-blank lines (a fence is one)."""
    out, paragraph = [], 0
    pos = 0
    blocks = []  # (is_fence, text)
    if markdown:
        for m in FENCE.finditer(text):
            blocks += [(False, text[pos:m.start()]), (True, m.group(1))]
            pos = m.end()
    blocks.append((False, text[pos:]))
    for is_fence, block in blocks:
        block = block.replace("\\\\\n", " ").replace("\\\n", " ")  # continuation lines (also in a docstring)
        for para in re.split(r"\n\s*\n", block):
            paragraph += 1
            for line in para.splitlines():
                if is_fence:
                    out.append((paragraph, "code", line))
                    continue
                out += [(paragraph, "code", s) for s in SPAN.findall(line)]
                rest = SPAN.sub(" ", line)
                out.append((paragraph, "prose" if markdown else "code", rest))
    return out


def command_words(text: str):
    """The words of a `prd-jax ...` or launch command in `text`, or None."""
    try:
        words = shlex.split(text, comments=True)
    except ValueError:
        words = text.split()
    for i, w in enumerate(words):
        if w == "prd-jax" or w.endswith("/prd-jax") or (w.startswith("launch/") and any(
                CONFIG_PATH.fullmatch(x) for x in words[i + 1:])):
            end = next((j for j in range(i + 1, len(words)) if words[j] in SEPARATORS), len(words))
            return words[i:end]
    return None


def placeholder(value: str) -> bool:
    return (not value or "..." in value or "<" in value or "$" in value or "/path/to" in value
            or bool(re.fullmatch(r"[A-Z][A-Z_]*(:.*)?", value)))


def clean(path: str, value):
    """A mention as written in prose: trailing punctuation dropped."""
    path = path.rstrip(".")
    if value is not None:
        value = value.rstrip(".,;:")
        while value.endswith(")") and value.count(")") > value.count("("):
            value = value[:-1]
    return path, value


# ------------------------------------------------------------------- configs


def config_args(path: str) -> tuple:
    """The args a config file documents (its ARGS; else the default)."""
    return tuple(runpy.run_path(path).get("ARGS", (None,)))


@functools.lru_cache(maxsize=None)
def every_config() -> tuple:
    """(spec, kind) of each config file at its first documented arg."""
    out = []
    for d, _, files in sorted(os.walk(os.path.join(ROOT, "configs"))):
        for f in sorted(files):
            path = os.path.join(d, f)
            if f.endswith(".py") and f != "__init__.py" and config_args(path):
                arg = config_args(path)[0]
                out.append(_rel(path) if arg is None else f"{_rel(path)}:{arg}")
    return tuple(out)


@functools.lru_cache(maxsize=None)
def schema_of(spec: str) -> tuple:
    config = config_check.load(os.path.join(ROOT, spec))
    return tuple(config_check.fields(config)), tuple(config_schema.leaves(config))


def has_field(spec: str, path: str) -> bool:
    declared, leaves = schema_of(spec)
    names = set(declared) | set(leaves)
    return path in names or any(n.startswith(path + ".") for n in names)


def resolve(spec: str, overrides: list, kind=None) -> None:
    """Load, override and validate as the command does before it loads a model."""
    config = config_check.load(os.path.join(ROOT, spec), overrides, kind)
    config_check.validate(config, kind)


def specs_of(spec: str, command: bool = False) -> list:
    """`spec` itself, or one per documented arg when its arg is a placeholder (`:ARG`) or, for
    a config named in prose (not a command), when it has none."""
    path, _, arg = spec.partition(":")
    if (arg and not placeholder(arg)) or (command and not arg):
        return [spec]
    args = config_args(os.path.join(ROOT, path))
    return [path if a is None else f"{path}:{a}" for a in args]


# ------------------------------------------------------------------- checks


def check_command(words: list) -> tuple:
    """(status, problem): status "checked" / "skipped"; problem None or a message."""
    overrides = [w for w in words if w.startswith("--config.")]
    if words[0] != "prd-jax" and not words[0].endswith("/prd-jax"):  # a launch script
        spec = next(w for w in words if CONFIG_PATH.fullmatch(w))
        return "checked", run_overrides(specs_of(spec, command=True), overrides)
    sub = words[1] if len(words) > 1 else ""
    if not any(w.startswith("--config") for w in words) and sub != "demo":
        return "skipped", None  # a command named in prose (`prd-jax compile`), or one that takes no config
    if sub not in CONFIG_COMMANDS:
        return "checked", f"prd-jax {sub} takes no --config"
    parser = cli.build_parser()
    try:
        args, rest = parser.parse_known_args(words[1:])
    except SystemExit:
        return "checked", "the prd-jax parser refused it"
    spec = args.config or os.path.join("configs", "demo.py")
    if placeholder(spec):
        return "skipped", None
    overrides = [r for r in rest if r.startswith("--config.")]
    return "checked", run_overrides(specs_of(spec, command=True), overrides, "demo" if sub == "demo" else None)


def run_overrides(specs: list, overrides: list, kind=None):
    """Apply the overrides (placeholders: their field must exist) to each spec; a problem or None."""
    if not specs:
        return "the config documents no arg to load it with"
    for spec in specs:
        given = []
        for item in overrides:
            path, value = clean(*MENTION.match(item).groups())
            if value is None or placeholder(value):
                if not has_field(spec, path):
                    return f"{spec}: no field {path!r}"
            else:
                given.append(f"--config.{path}={value}")
        try:
            resolve(spec, given, kind)
        except (ValueError, FileNotFoundError, KeyError) as e:
            return f"{spec}: {e}"
    return None


def check_moved(path: str, value):
    """A key the docs call moved must fail naming its new place."""
    try:
        apply_overrides(config_check.load(os.path.join(ROOT, "configs", "rl", "tiny.py")),
                        [f"--config.{path}={value or 1}"])
    except ValueError as e:
        return None if f"moved to config.{MOVED[path]}" in str(e) else f"{path}: {e}"
    return f"--config.{path} was accepted; the docs say it moved to config.{MOVED[path]}"


def check_mention(mentions: list, specs):
    """A problem with the bare mentions [(path, value)] of one line or span (applied
    together), or None. `specs`: the configs they belong to. None: the configs that declare
    all their fields; the values must have the declared type in each of them and load and
    validate in at least one (a field such as `checkpoint` suits some eval configs only)."""
    items = [f"--config.{p}" + ("" if v is None else f"={v}") for p, v in mentions]
    if specs is not None:
        return run_overrides(specs, items)
    specs = [s for s in every_config() if all(has_field(s, path) for path, _ in mentions)]
    if not specs:
        return f"no config declares {', '.join('config.' + p for p, _ in mentions)}"
    problems = [run_overrides([s], items) for s in specs]
    typed = [p for p in problems if p and "expected " in p]
    if typed or all(problems):
        return (typed or problems)[0]
    return None


def collect(name: str, text: str, markdown: bool) -> dict:
    """{"commands": n, "mentions": n, "skipped": n, "problems": [...]} of one source."""
    out = {"commands": 0, "mentions": 0, "skipped": 0, "problems": []}
    own = [] if markdown or not name.startswith("configs/") else specs_of(name)
    paragraphs = {}
    for paragraph, kind, text_ in units(text, markdown):
        paragraphs.setdefault(paragraph, []).append(text_)
    for paragraph, kind, unit in units(text, markdown):
        words = command_words(unit) if kind == "code" else None
        if words:
            status, problem = check_command(words)
            out["commands" if status == "checked" else "skipped"] += 1
            if problem:
                out["problems"].append(f"{name}: {' '.join(words)}: {problem}")
            continue
        mentions = []
        for m in MENTION.finditer(unit):
            path, value = clean(*m.groups())
            if path == "x":  # the docs' placeholder for any field
                out["skipped"] += 1
            elif path in MOVED:
                out["mentions"] += 1
                problem = check_moved(path, value)
                out["problems"] += [f"{name}: {m.group(0)}: {problem}"] if problem else []
            else:
                mentions.append((path, value))
        if not mentions:
            continue
        if markdown:  # the config named nearest in the paragraph, else every one declaring the fields
            whole = " ".join(paragraphs[paragraph])
            at = whole.find(f"--config.{mentions[0][0]}")
            named = sorted(CONFIG_PATH.finditer(whole), key=lambda c: abs(c.start() - at))
            specs = specs_of(named[0].group(0)) if named else None
        else:
            specs = own or None
        out["mentions"] += len(mentions)
        problem = check_mention(mentions, specs)
        if problem:
            shown = " ".join(f"--config.{p}" + ("" if v is None else f"={v}") for p, v in mentions)
            out["problems"].append(f"{name}: {shown}: {problem}")
    return out


SOURCES = sources()


@pytest.mark.parametrize("name,text,markdown", SOURCES, ids=[s[0] for s in SOURCES])
def test_documented_commands_and_overrides_resolve(name, text, markdown):
    found = collect(name, text, markdown)
    assert not found["problems"], "\n".join(found["problems"])


def test_the_scan_finds_the_documented_commands():
    """The scan is not vacuous: it reaches the commands and mentions the docs hold."""
    totals = {"commands": 0, "mentions": 0, "skipped": 0}
    for name, text, markdown in SOURCES:
        found = collect(name, text, markdown)
        for k in totals:
            totals[k] += found[k]
    print(f"documented commands checked: {totals}")
    assert totals["commands"] >= 100 and totals["mentions"] >= 40, totals


# ------------------------------------------------------------------- the scanner itself


def test_units_join_continuations_and_split_spans():
    text = ("Run `prd-jax train --config configs/rl/tiny.py --workdir W` then\n\n"
            "```\nprd-jax eval --config configs/eval/smollm2_gsm8k.py \\\n    --config.num_problems=4\n```\n")
    got = units(text, markdown=True)
    commands = [command_words(u) for _, k, u in got if k == "code" and command_words(u)]
    assert commands == [["prd-jax", "train", "--config", "configs/rl/tiny.py", "--workdir", "W"],
                        ["prd-jax", "eval", "--config", "configs/eval/smollm2_gsm8k.py", "--config.num_problems=4"]]


def test_bad_documented_examples_are_caught():
    page = ("```\nprd-jax train --config configs/rl/tiny.py --workdir W --config.rl.minibatchs=2\n"
            "prd-jax serve --model tiny --config.x=1\nprd-jax export --workdir W --out D\n```\n\n"
            "With configs/sft/tiny.py, `--config.data.eval_splt=test` holds out the test split.\n\n"
            "`--config.rl.temperature=1.0` moved, and `--config.no_such_field=3` is nowhere.\n")
    found = collect("page.md", page, True)
    assert (found["commands"], found["skipped"], found["mentions"]) == (2, 1, 3)
    problems = "\n".join(found["problems"])
    assert "nearest: config.rl.minibatches" in problems and "prd-jax serve takes no --config" in problems
    assert "nearest: config.data.eval_split" in problems  # the paragraph's config: sft/tiny.py
    assert "no config declares config.no_such_field" in problems and "temperature" not in problems
    assert len(found["problems"]) == 4


def test_mentions_without_a_named_config_check_every_declaring_config():
    assert check_mention([("rl.minibatches", "1")], None) is None  # every RL config declares it
    assert "expected int" in check_mention([("rl.minibatches", "two")], None)
    assert "must divide config.grad_accum_steps" in check_mention([("rl.minibatches", "7")], None)  # validated
    assert check_mention([("data.eval_split", None)], None) is None
    assert "no config declares config.rl.nothing" in check_mention([("rl.nothing", "1")], None)
