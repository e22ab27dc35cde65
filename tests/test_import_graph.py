"""The module-level import graph of `prd_jax` has no cycles, and function-local imports
are kept only where they keep TensorFlow or torch (or a sandboxed child's own imports) out
of the core import path (issue 14 §5).

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
           "prd_jax.data._tf", "math_verify", "pyarrow",
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


def _targets(node, module: str) -> list:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in MODULES]
    base = node.module or ""
    if node.level:
        package = module if MODULES[module].name == "__init__.py" else module.rsplit(".", 1)[0]
        for _ in range(node.level - 1):
            package = package.rsplit(".", 1)[0]
        base = f"{package}.{base}" if base else package
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
