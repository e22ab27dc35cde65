"""The module-level import graph of `prd_jax` has no cycles, and function-local imports
are kept only where they keep TensorFlow or torch (or a sandboxed child's own imports) out
of the core import path (issue 14 §5). Issue 49 §7 adds: no private name crosses rooms,
`aot/` does not reach `evaluate`, and the eval harness holds no backend branch (issue 49 §2).

The graph is read from the source with `ast`, not by importing: an edge A -> B means a
module-level statement of A imports module B (`from pkg import sub` is an edge to
`pkg.sub` when `sub` is a module, else to `pkg`; a package's `__init__` has edges to the
submodules it imports).
"""

from __future__ import annotations

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "prd_jax"

# Imported lazily on purpose: TensorFlow / seqio / TFDS / clu (which loads TensorFlow),
# torch / transformers, and the data-layer modules that import them; and math_verify (sympy),
# which runs in the grading worker process and is imported in-process only by its fallback.
LAZY_OK = ("tensorflow", "tensorflow_datasets", "seqio", "clu", "torch", "transformers", "etils",
           "prd_jax.data.seqio_tasks", "prd_jax.data.tfds_builders", "prd_jax.data.vocab", "prd_jax.data.seqio_rows",
           "prd_jax.data.tf_cpu", "math_verify", "pyarrow",
           "wandb")  # wandb: ~1.5 s to import, paid only by runs with "wandb" in config.loggers (prd_jax.tracking)
# The command line imports each command's modules in its handler, so `prd-jax --help` starts
# without jax (issue 35 §6; tests/test_cli.py checks sys.modules).
LAZY_MODULES = ("prd_jax.cli",)
# Functions whose source runs in a fresh interpreter (sandboxed children, worker sources):
# their imports must be inside them.
CHILD_FUNCTIONS = {("prd_jax.rewards.code", "_runner_main"), ("prd_jax.rewards.code", "_child_preexec"),
                   ("prd_jax.rewards.code", "_enc"), ("prd_jax.rewards.code", "_dec"),
                   ("prd_jax.rewards.code", "_judge_entry"), ("prd_jax.rewards.code", "_ns_setup")}


def _modules() -> dict:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def room(module: str) -> str:
    """The room of a module: its top-level module or subpackage under `prd_jax`
    (`prd_jax.serve.slots` -> `prd_jax.serve`; `prd_jax.sampling` -> itself)."""
    return ".".join(module.split(".")[:2])


def _private(dotted: str) -> bool:
    return any(p.startswith("_") and not p.startswith("__") for p in dotted.split("."))


def _resolve(node, module: str) -> str:
    base = node.module or ""
    if node.level:
        package = module if MODULES[module].name == "__init__.py" else module.rsplit(".", 1)[0]
        for _ in range(node.level - 1):
            package = package.rsplit(".", 1)[0]
        base = f"{package}.{base}" if base else package
    return base


def _targets(node, module: str) -> list:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in MODULES]
    base = _resolve(node, module)
    subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES]
    rest = [a for a in node.names if f"{base}.{a.name}" not in MODULES]
    return subs + ([base] if rest and base in MODULES else [])


def _module_level(tree) -> list:
    """Import statements executed when the module is imported (incl. inside if/try)."""
    out, todo = [], list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
        elif isinstance(node, (ast.If, ast.Try)):
            todo += node.body + node.orelse + [s for h in getattr(node, "handlers", []) for s in h.body]
            todo += getattr(node, "finalbody", [])
    return out


def graph() -> dict:
    return {m: {t for node in _module_level(ast.parse(p.read_text())) for t in _targets(node, m)} - {m}
            for m, p in MODULES.items()}


def find_cycle(edges: dict):
    """One cycle as a list of modules, or None (iterative DFS)."""
    state = {}
    for start in sorted(edges):
        if start in state:
            continue
        stack, path = [(start, iter(sorted(edges[start])))], [start]
        state[start] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
                path.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            elif nxt not in state:
                state[nxt] = 1
                stack.append((nxt, iter(sorted(edges.get(nxt, ())))))
                path.append(nxt)
    return None


def test_find_cycle_on_hand_graphs():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "d"}, "b": set(), "d": {"e"}, "e": {"d"}}) == ["d", "e", "d"]


def test_no_import_cycles():
    edges = graph()
    assert len(edges) > 50  # the walk saw the package
    assert "prd_jax.operators.core" in edges["prd_jax.operators"]
    assert find_cycle(edges) is None, find_cycle(edges)


def _function_local_imports():
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text())
        top = {id(n) for n in _module_level(tree)}
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in top:
                    names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                             else [node.module or "."] + [f"{node.module}.{a.name}" for a in node.names])
                    yield module, fn.name, node.lineno, names


def test_function_local_imports_only_keep_tensorflow_or_torch_out():
    bad = []
    for module, fn, line, names in _function_local_imports():
        if (module, fn) in CHILD_FUNCTIONS or module in LAZY_MODULES:
            continue
        if not any(n == ok or n.startswith(ok + ".") for n in names for ok in LAZY_OK):
            bad.append(f"{module}:{line} in {fn}(): {names[0]}")
    assert not bad, "function-local imports that could be at module level:\n" + "\n".join(sorted(bad))


def private_imports(module: str, tree) -> list:
    """(name, line) of every private `prd_jax` name `module` takes from another room: `from M
    import _x`, a private module on the path (`prd_jax.data._loader`), or `m._x` on an imported
    module `m`. Every import statement counts, function-local ones too."""
    out, aliases = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = _resolve(node, module)
            if base.split(".")[0] != "prd_jax":
                continue
            for a in node.names:
                full = f"{base}.{a.name}"
                if full in MODULES:
                    aliases[a.asname or a.name] = full
                if _private(full) and room(full if full in MODULES else base) != room(module):
                    out.append((full, node.lineno))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] != "prd_jax":
                    continue
                if a.asname:
                    aliases[a.asname] = a.name
                if _private(a.name) and room(a.name) != room(module):
                    out.append((a.name, node.lineno))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                and _private(node.attr) and room(aliases[node.value.id]) != room(module)):
            out.append((f"{aliases[node.value.id]}.{node.attr}", node.lineno))
    return out


def test_private_imports_on_hand_sources():
    MODULES.setdefault("prd_jax.fake_room.mod", PACKAGE / "fake_room" / "mod.py")  # resolved by name only
    try:
        src = ("from prd_jax.sampling import _chosen, public\nfrom prd_jax import sampling as s\n"
               "from prd_jax.fake_room import _sibling\ndef f():\n    from prd_jax.data._loader import tf\n"
               "    return s._hidden, s.shown\n")
        found = sorted(private_imports("prd_jax.fake_room.mod", ast.parse(src)))
        assert found == [("prd_jax.data._loader.tf", 5), ("prd_jax.sampling._chosen", 1), ("prd_jax.sampling._hidden", 6)]
        assert private_imports("prd_jax.sampling", ast.parse("from prd_jax.sampling import _x\n")) == []
    finally:
        del MODULES["prd_jax.fake_room.mod"]


def test_no_private_name_crosses_rooms():
    found = {(m, name): line for m, path in MODULES.items() for name, line in private_imports(m, ast.parse(path.read_text()))}
    bad = [f"{m}:{line} imports {name} (room {room(name)})" for (m, name), line in sorted(found.items())]
    assert not bad, "private names imported across rooms (make them public or move them):\n" + "\n".join(bad)


def _reach(edges: dict, start: set) -> set:
    seen, todo = set(), list(start)
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += edges.get(m, ())
    return seen


def test_aot_does_not_reach_evaluate():
    """`aot/` builds eval programs from `eval_setup`, below the eval harness: no module of
    `prd_jax.aot` imports `prd_jax.evaluate`, at module level through any chain or in a function."""
    aot = {m for m in MODULES if room(m) == "prd_jax.aot"}
    assert len(aot) > 2
    assert "prd_jax.eval_setup" in _reach(graph(), aot)  # the walk follows aot's imports
    assert "prd_jax.evaluate" not in _reach(graph(), aot)
    for m in aot:
        for node in ast.walk(ast.parse(MODULES[m].read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [_resolve(node, m)] + [f"{_resolve(node, m)}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            assert "prd_jax.evaluate" not in names, f"{m}:{node.lineno} imports prd_jax.evaluate"


# What the eval harness may not name: the LM's kind lives behind `operators.lm_protocol.LanguageModel`
# (`eval_setup.EvalSetup.open_lm` is the one place that tells the backends apart).
BACKEND_ATTRIBUTES = {"remote", "backend", "host", "kind", "api", "endpoint_row", "client"}
BACKEND_NAMES = {"ModelLM", "RemoteLM", "RemoteHost", "backend", "BackendConfig", "eval_lm", "make_remote_lm"}


def backend_branches(tree) -> list:
    """(what, line) of every attribute or name in `tree` that tells the LM backends apart."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in BACKEND_ATTRIBUTES:
            out.append((f".{node.attr}", node.lineno))
        elif isinstance(node, ast.Name) and node.id in BACKEND_NAMES:
            out.append((node.id, node.lineno))
        elif isinstance(node, (ast.ImportFrom, ast.Import)):
            out += [(a.name, node.lineno) for a in node.names if a.name in BACKEND_NAMES]
    return out


def test_backend_branches_on_hand_sources():
    src = ("if ec.backend.remote:\n    lm.host.begin(2)\nx = ModelLM(p)\nfrom prd_jax.operators.lm import ModelLM\n"
           "lm.begin(2)\nrows = [r for r in rows if 'remote' in r]\n")
    assert sorted(backend_branches(ast.parse(src))) == [(".backend", 1), (".host", 2), (".remote", 1),
                                                        ("ModelLM", 3), ("ModelLM", 4)]


def test_evaluate_holds_no_backend_branch():
    found = backend_branches(ast.parse(MODULES["prd_jax.evaluate"].read_text()))
    assert not found, f"prd_jax/evaluate.py tells the LM backends apart at {found}; use the LanguageModel seam"
