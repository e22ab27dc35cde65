"""The documentation says only what exists: links, paths, commands and Make targets.

Scans README.md and docs/**/*.md (plain text; nothing here imports JAX):

- every relative link resolves to a file or folder of the repository, and a `#anchor` to a
  heading of the target page (GitHub's heading slugs);
- every repository path named in inline code or a code block exists (`configs/...py:arg`
  is checked without its `:arg`);
- every `prd-jax SUBCOMMAND` in code names a real subcommand, each of its flags is one of
  that subcommand's options (`prd_jax.cli.build_parser`, which imports no JAX), and the file
  its `--config` names exists;
- every `make TARGET` in code is a target of the Makefile;
- every python code block compiles; a block is executed unless a comment line before it
  says why not (`<!-- not run: ... -->`) or names the test that runs it
  (`<!-- example-task -->`: tests/test_tasks.py).
"""

from __future__ import annotations

import argparse
import pathlib
import re
import shlex

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
TOP_DIRS = ("prd_jax", "configs", "benchmarks", "tests", "launch", "notebooks", "docs")
ROOT_FILES = ("Makefile", "pyproject.toml", "constraints.txt", "README.md")

FENCE = re.compile(r"^```([\w-]*)\n(.*?)^```$", re.S | re.M)
INLINE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
PATH = re.compile(r"^(?:%s)/[\w./-]*$" % "|".join(TOP_DIRS))


def _rel(page: pathlib.Path) -> str:
    return str(page.relative_to(ROOT))


def _strip_fences(text: str) -> str:
    return FENCE.sub("", text)


def _code(text: str) -> list:
    """Inline code spans (outside fences) and fenced blocks' lines, in page order."""
    spans = [m.group(1) for m in INLINE.finditer(_strip_fences(text))]
    for m in FENCE.finditer(text):
        spans += m.group(2).splitlines()
    return spans


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: pathlib.Path) -> set:
    seen, out = {}, set()
    for line in _strip_fences(page.read_text()).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def test_slug_follows_github():
    assert slug("Will it fit? `prd-jax compile`") == "will-it-fit-prd-jax-compile"
    assert slug("A loss or an advantage estimator") == "a-loss-or-an-advantage-estimator"
    assert slug("Training data of your own (seqio)") == "training-data-of-your-own-seqio"


def test_pages_exist():
    names = {_rel(p) for p in PAGES}
    for page in ("README.md", "docs/operators.md", "docs/extending.md", "docs/training.md",
                 "docs/scaling.md", "docs/design.md", "docs/demo.md", "docs/backends.md"):
        assert page in names, page
    assert len((ROOT / "README.md").read_text().splitlines()) <= 300


def test_relative_links_resolve():
    bad = []
    for page in PAGES:
        for target in LINK.findall(_strip_fences(page.read_text())):
            if re.match(r"^[a-z][\w+.-]*:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists() or ROOT not in (dest, *dest.parents):
                bad.append(f"{_rel(page)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                bad.append(f"{_rel(page)}: {target} (no heading #{anchor})")
    assert not bad, "\n".join(bad)


def _paths_in(span: str) -> list:
    out = []
    for word in re.split(r"[\s,;()\[\]=\"']+", span):
        word = word.rstrip(".:")
        if any(c in word for c in "*{}<>|") or "..." in word:
            continue
        word = word.split(":")[0]
        if PATH.match(word) or word in ROOT_FILES:
            out.append(word)
    return out


def test_named_paths_exist():
    bad = []
    for page in PAGES:
        for span in _code(page.read_text()):
            for path in _paths_in(span):
                if not (ROOT / path).exists():
                    bad.append(f"{_rel(page)}: {path}")
    assert not bad, "\n".join(sorted(set(bad)))


def _subcommands() -> dict:
    from prd_jax.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {name: {o for a in p._actions for o in a.option_strings} for name, p in sub.choices.items()}


def _placeholder(word: str) -> bool:
    return bool(re.fullmatch(r"[A-Z][A-Z_]*(:.*)?", word))


def _commands(text: str) -> list:
    """Every `prd-jax ...` command in code, continuation lines joined, as token lists."""
    out = []
    blocks = [m.group(2).replace("\\\n", " ") for m in FENCE.finditer(text)]
    spans = [m.group(1) for m in INLINE.finditer(_strip_fences(text))]
    for line in (ln for b in blocks for ln in b.splitlines()) if blocks else ():
        if "prd-jax " in line:
            out.append(line)
    out += [s for s in spans if s.startswith("prd-jax ")]
    commands = []
    for line in out:
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            words = line.split()
        starts = [i for i, w in enumerate(words) if w == "prd-jax" or w.endswith("/prd-jax")]
        for i in starts:
            commands.append(words[i + 1:])
    return commands


def test_cli_commands_in_docs_are_real():
    subcommands = _subcommands()
    bad, seen = [], 0
    for page in PAGES:
        for words in _commands(page.read_text()):
            if not words or _placeholder(words[0]) or words[0] in ("--help", "-h"):
                continue
            seen += 1
            name = words[0].rstrip(":")  # `prd-jax train: error: ...` quotes an error line
            if name not in subcommands:
                bad.append(f"{_rel(page)}: prd-jax {name} (commands: {sorted(subcommands)})")
                continue
            for j, word in enumerate(words[1:], 1):
                if word in ("&", "&&", "|", ";"):
                    break
                flag = word.split("=")[0]
                if flag.startswith("--") and not flag.startswith("--config.") and flag not in subcommands[name]:
                    bad.append(f"{_rel(page)}: prd-jax {name} {flag} (not an option of {name})")
                if flag == "--config" and j + 1 < len(words):
                    value = words[j + 1] if "=" not in word else word.split("=", 1)[1]
                    path = value.split(":")[0]
                    if not _placeholder(value) and not (ROOT / path).is_file():
                        bad.append(f"{_rel(page)}: prd-jax {name} --config {value} (no such file)")
    assert seen >= 10  # the README's tour alone has more
    assert not bad, "\n".join(bad)


def test_make_targets_exist():
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([A-Za-z][\w-]*)\s*:(?!=)", makefile, re.M))
    bad = []
    for page in PAGES:
        for span in _code(page.read_text()):
            for target in re.findall(r"(?:^|[\s;&(])make ([a-z][\w-]*)", span):
                if target not in targets:
                    bad.append(f"{_rel(page)}: make {target} (Makefile targets: {sorted(targets)})")
    assert not bad, "\n".join(sorted(set(bad)))


def _python_blocks() -> list:
    """(page, block, how): how is "run", "not run: why" or "example-task"."""
    out = []
    for page in PAGES:
        text = page.read_text()
        for m in FENCE.finditer(text):
            if m.group(1) != "python":
                continue
            before = text[:m.start()].rstrip().splitlines()
            note = before[-1].strip() if before else ""
            how = "run"
            if note == "<!-- example-task -->":
                how = "example-task"
            elif note.startswith("<!-- not run:"):
                how = "not run"
            out.append((page, m.group(2), how))
    return out


def test_python_blocks_compile():
    blocks = _python_blocks()
    assert any(how == "example-task" for _, _, how in blocks)  # run by tests/test_tasks.py
    for page, block, _ in blocks:
        compile(block, _rel(page), "exec")


RUN = [(p, b) for p, b, how in _python_blocks() if how == "run"]


@pytest.mark.slow
@pytest.mark.parametrize("page,block", RUN, ids=[f"{_rel(p)}#{i}" for i, (p, _) in enumerate(RUN)])
def test_python_blocks_run(page, block, capsys):
    """A runnable block runs as printed (the README's loads SmolLM2 and decodes greedily)."""
    exec(compile(block, _rel(page), "exec"), {"__name__": "docs_block"})
    assert capsys.readouterr().out.strip()  # each runnable block prints its result
