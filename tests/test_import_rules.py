"""The package's import rules (docs/architecture.md, "Import rules"), read from the source with `ast`: the library
never imports its examples (the top-level `envs` and `launch`), and no library module imports a command-line module.

A command-line module parses a command's arguments and prints: `seedleague/cli.py`, any `cli.py` below it, and any
module that defines a top-level `add_parser` (a `seedleague` subcommand) or `main` (a `python -m` entry point).
Every import counts, function-local ones too, and `from seedleague.eval import cli` names the module `cli`.
"""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "seedleague"
EXAMPLES = ("envs", "launch")  # top-level packages of the repository that the library must not import


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, tuple[pathlib.Path, ast.Module]]:
    return {_module_name(path): (path, ast.parse(path.read_text(), str(path))) for path in sorted(PACKAGE.rglob("*.py"))
            if not path.name.endswith(("_pb2.py", "_pb2_grpc.py"))}


MODULES = _modules()


def _imports(name: str, path: pathlib.Path, tree: ast.Module) -> list[tuple[int, str]]:
    """(line, every dotted name the statement may import) for each import in the module, at any depth: for
    `from a.b import c`, both "a.b" and "a.b.c" (c may be a module or a name in a.b)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package, up level - 1 more
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names if alias.name != "*"]
    return found


def _is_cli(name: str, tree: ast.Module) -> bool:
    if name == "seedleague.cli" or name.endswith(".cli"):
        return True
    return any(isinstance(node, ast.FunctionDef) and node.name in ("add_parser", "main") for node in tree.body)


CLI_MODULES = {name for name, (_, tree) in MODULES.items() if _is_cli(name, tree)}


def test_the_rules_see_the_modules_they_are_about():
    # A rule that reads no module, or finds no command-line module, could not fail.
    assert {"seedleague.cli", "seedleague.presets", "seedleague.output", "seedleague.launch.local"} <= set(MODULES)
    assert {"seedleague.cli", "seedleague.eval.cli", "seedleague.league.cli", "seedleague.export.cli",
            "seedleague.eval.exploit", "seedleague.tools.check_worker", "seedleague.tools.fake_host",
            "seedleague.launch.ray_cluster"} <= CLI_MODULES
    assert "seedleague.output" not in CLI_MODULES and "seedleague.subcommand" not in CLI_MODULES
    tree = ast.parse("from seedleague.eval import cli\nfrom ..eval.cli import run\nimport envs.gym_worker\n")
    names = [imported for _, imported in _imports("seedleague.host.x", PACKAGE / "host" / "x.py", tree)]
    assert {"seedleague.eval.cli", "seedleague.eval.cli.run", "envs.gym_worker"} <= set(names)


def _report(found) -> list[str]:
    """One line per import statement (`from a.b import c` names both a.b and a.b.c): the first name it breaks with."""
    lines: dict = {}
    for path, line, imported in found:
        lines.setdefault((path, line), f"{path.relative_to(ROOT)}:{line} imports {imported}")
    return list(lines.values())


def test_the_library_does_not_import_its_examples():
    wrong = _report((path, line, imported) for name, (path, tree) in MODULES.items()
                    for line, imported in _imports(name, path, tree) if imported.split(".")[0] in EXAMPLES)
    assert not wrong, ("the seedleague package imports the reference workers or launchers: " + "; ".join(wrong)
                       + " (reach a game through seedleague.games; processes start through seedleague.launch)")


def test_no_library_module_imports_a_command_line_module():
    wrong = _report((path, line, imported) for name, (path, tree) in MODULES.items() if name not in CLI_MODULES
                    for line, imported in _imports(name, path, tree) if imported in CLI_MODULES)
    assert not wrong, ("a library module imports a command-line module: " + "; ".join(wrong)
                       + " (move what it needs out of the command-line module into a library module)")
