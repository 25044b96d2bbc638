"""The import graph of a checkout's `seedleague/` package: circles, function-local imports, orbax importers.

Reads the source with `ast` (nothing is imported). Every import counts, those inside functions too; a circle is a
strongly connected component of more than one module; a function-local import whose line says
`# optional-heavy:` is listed but left out of the circles, as tests/test_import_rules.py does.

    python -m benchmarks.import_graph                 # this checkout
    python -m benchmarks.import_graph /tmp/before -v  # another tree (e.g. `git archive <commit> seedleague`); -v lists
                                                      # every function-local import
"""

from __future__ import annotations

import argparse
import ast
import collections
import pathlib
import sys


def modules(root: pathlib.Path) -> dict[str, pathlib.Path]:
    """Dotted name -> path of every module of `root`/seedleague (generated protobuf modules left out)."""
    found = {}
    for path in sorted((root / "seedleague").rglob("*.py")):
        if path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
            continue
        parts = path.relative_to(root).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _owner(name: str, known: dict) -> str | None:
    while name and name not in known:  # a name in a module: that module
        name = name.rpartition(".")[0]
    return name or None


def imports(name: str, path: pathlib.Path, known: dict) -> list[tuple[int, str, bool, bool]]:
    """(line, imported module or "<external>:name", inside a function, marked optional-heavy) per import."""
    source = path.read_text()
    lines, tree = source.splitlines(), ast.parse(source)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []

    def visit(node: ast.AST, local: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                if isinstance(child, ast.Import):
                    names = [alias.name for alias in child.names]
                else:
                    base = child.module or ""
                    if child.level:
                        anchor = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                        base = ".".join(anchor + ([child.module] if child.module else []))
                    names = [f"{base}.{alias.name}" for alias in child.names]
                    names = [n for n in names if n in known] or [base]
                marked = any("# optional-heavy:" in lines[i - 1] for i in range(child.lineno, child.end_lineno + 1))
                for imported in names:
                    owner = _owner(imported, known) if imported.split(".")[0] == "seedleague" else None
                    if owner != name:
                        found.append((child.lineno, owner or f"<external>:{imported}", local, marked))
            visit(child, local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(tree, False)
    return found


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan 1972), each sorted."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    sys.setrecursionlimit(10_000)

    def strong(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for child in sorted(graph.get(node, ())):
            if child not in index:
                strong(child)
                low[node] = min(low[node], low[child])
            elif child in on_stack:
                low[node] = min(low[node], index[child])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            strong(node)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", nargs="?", default=str(pathlib.Path(__file__).resolve().parents[1]),
                        help="the tree holding seedleague/ (default: this checkout)")
    parser.add_argument("-v", action="store_true", help="list every function-local import")
    args = parser.parse_args(argv)
    root = pathlib.Path(args.root).resolve()
    known = modules(root)
    graph: dict[str, set[str]] = collections.defaultdict(set)
    local_by_module, listing, orbax = collections.Counter(), [], []
    for name, path in known.items():
        for line, imported, local, marked in imports(name, path, known):
            if imported.startswith("<external>:orbax"):
                orbax.append(name)
            if local:
                local_by_module[name] += 1
                listing.append(f"{path.relative_to(root)}:{line} -> {imported}{' (optional-heavy)' if marked else ''}")
            if not imported.startswith("<external>") and not (local and marked):
                graph[name].add(imported)
    found = circles(graph)
    print(f"modules: {len(known)}")
    print(f"circles: {len(found)}; modules in them: {sum(map(len, found))}")
    for circle in found:
        print("  " + " ".join(m.removeprefix("seedleague.") for m in circle))
    print(f"function-local imports: {sum(local_by_module.values())}")
    for name, count in local_by_module.most_common():
        print(f"  {count:3d} {name}")
    print(f"modules importing orbax: {sorted(set(orbax))}")
    if args.v:
        print("\n".join(listing))
    return 0


if __name__ == "__main__":
    sys.exit(main())
