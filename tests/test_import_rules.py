"""The package's import rules (docs/architecture.md, "Import rules"), read from the source with `ast`: the library
never imports its examples (the top-level `envs` and `launch`), no library module imports a command-line module,
the modules of `seedleague` import each other in no circle, and one module restores orbax checkpoints.

A command-line module parses a command's arguments and prints: `seedleague/cli.py`, any `cli.py` below it, and any
module that defines a top-level `add_parser` (a `seedleague` subcommand) or `main` (a `python -m` entry point).
Every import counts, function-local ones too, and `from seedleague.eval import cli` names the module `cli`. For the
circle, a function-local import is left out only where its line says `# optional-heavy: <why>` (a heavy optional
dependency, imported where it is used).
"""

import ast
import json
import os
import pathlib
import subprocess
import sys

from benchmarks.import_graph import circles  # Tarjan's strongly connected components, as the benchmark counts them

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "seedleague"
EXAMPLES = ("envs", "launch")  # top-level packages of the repository that the library must not import
OPTIONAL_HEAVY = "# optional-heavy:"  # on a function-local import's line: a heavy optional dependency, not a circle


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
            "seedleague.eval.exploit_args", "seedleague.tools.check_worker", "seedleague.tools.fake_host",
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


def _edges(name: str, path: pathlib.Path, source: str, modules) -> set[str]:
    """The `seedleague` modules `name` (its `source` at `path`) imports at any depth, and the packages whose
    `__init__` that runs; a function-local import marked OPTIONAL_HEAVY is left out. `from a import b` names
    module a.b where b is one."""
    tree, lines = ast.parse(source), source.splitlines()
    local = {id(node) for function in ast.walk(tree) if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
             for node in ast.walk(function) if isinstance(node, (ast.Import, ast.ImportFrom))}
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if id(node) in local and any(OPTIONAL_HEAVY in lines[n - 1] for n in range(node.lineno, node.end_lineno + 1)):
            continue
        names = [imported for line, imported in _imports(name, path, ast.Module([node], [])) if line == node.lineno]
        if isinstance(node, ast.ImportFrom):  # the submodules it names, else the module it imports from
            names = [n for n in names[1:] if n in modules] or names[:1]
        for imported in names:
            while imported and imported not in modules:  # a name in a module: that module
                imported = imported.rpartition(".")[0]
            parts = imported.split(".")
            found |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & set(modules)
    return found - {name}


GRAPH = {name: _edges(name, path, path.read_text(), MODULES) for name, (path, _) in MODULES.items()}


def test_the_circle_finder_finds_circles_and_reads_marks():
    # The rule below could not fail if these did not hold.
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []
    source = ("from seedleague import output\n"
              "def f():\n    from seedleague.eval import board  # optional-heavy: pyspiel\n"
              "def g():\n    from seedleague.api import Policy\n")
    edges = _edges("seedleague.x", PACKAGE / "x.py", source, MODULES)
    assert edges == {"seedleague", "seedleague.output", "seedleague.api"}
    assert {"seedleague.artifacts.policy", "seedleague.artifacts"} <= GRAPH["seedleague.artifacts.named"]


def test_the_modules_of_the_package_import_each_other_in_no_circle():
    found = circles(GRAPH)
    assert not found, ("modules of seedleague import each other in a circle: " + "; ".join(
        " <-> ".join(circle) for circle in found) + " (move what both need into a module below them, e.g. "
        "seedleague.artifacts; a function-local import is no way around a circle)")


def _imports_orbax(name: str, path: pathlib.Path, tree: ast.Module) -> bool:
    return any(imported.split(".")[0] == "orbax" for _, imported in _imports(name, path, tree))


def test_exactly_one_module_restores_orbax_checkpoints():
    # Only a module that imports orbax can call its restore; seedleague.checkpoint is that one module, and reads
    # (seedleague.artifacts.load) and the writer's own restore both go through it.
    readers = sorted(name for name, (path, tree) in MODULES.items() if _imports_orbax(name, path, tree))
    assert readers == ["seedleague.checkpoint"], (
        f"modules that import orbax: {readers}; restore checkpoints through seedleague.checkpoint's read_* functions")
    _, tree = MODULES["seedleague.checkpoint"]
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
             and node.func.attr == "restore"]
    assert calls, "seedleague.checkpoint no longer calls orbax's restore: this rule reads the wrong module"


# Protocol v1's own representation (one observation array, one action array) and the conversions to and from it;
# the package's one representation is v2's named tensors and heads (seedleague.protocol.named, docs/architecture.md).
V1_NAMES = {f"seedleague.protocol.specs.{name}" for name in ("EnvSpec", "StepBatch", "ActionBatch", "zero_step",
                                                               "check_step")}
V1_NAMES |= {"seedleague.protocol.named.named_of_v1", "seedleague.protocol.named.v1_of_named", "seedleague.v1.env_pb2"}
# The wire edge: v1's codec and client, the named client's v1 adapter, the servicer that serves both versions, and the
# fake host, which says what v1 can carry of a spec and holds a v1 session's messages to its size limit.
WIRE_EDGE = {"seedleague.protocol.specs", "seedleague.protocol.named", "seedleague.protocol.codec",
             "seedleague.protocol.client", "seedleague.protocol.client_v2", "seedleague.host.servicer",
             "seedleague.tools.fake_host"}


def test_protocol_v1_is_an_adapter_at_the_wire_edge_and_nowhere_else():
    found = [(path, line, imported) for name, (path, tree) in MODULES.items()
             for line, imported in _imports(name, path, tree) if imported in V1_NAMES]
    assert {"seedleague.protocol.codec", "seedleague.protocol.client"} <= {  # the rule reads what it is about
        _module_name(path) for path, _, _ in found}
    wrong = _report(entry for entry in found if _module_name(entry[0]) not in WIRE_EDGE)
    assert not wrong, ("protocol v1's representation above the wire edge: " + "; ".join(wrong) + " (take "
                       "seedleague.protocol.named's NamedEnvSpec, NamedStepBatch and NamedActionBatch; a spec of one "
                       "tensor and one discrete head is protocol.named.flat_spec, and flat_model says it is one)")


def test_trained_artifacts_sit_below_the_host_the_evaluation_and_the_output():
    # seedleague.artifacts is the floor both host/ and eval/ stand on (docs/architecture.md, "Trained artifacts").
    above = ("seedleague.host", "seedleague.eval", "seedleague.output", "seedleague.api", "seedleague.launch",
             "seedleague.league.service", "seedleague.league.server")
    reached, frontier = set(), [name for name in GRAPH if name.startswith("seedleague.artifacts")]
    assert frontier, "no seedleague.artifacts modules: this rule reads nothing"
    while frontier:
        for imported in GRAPH[frontier.pop()] - reached:
            reached.add(imported)
            frontier.append(imported)
    wrong = sorted(name for name in reached if name.startswith(above))
    assert not wrong, f"seedleague.artifacts reaches up to {wrong}: move what it needs into artifacts/ or below it"


HEAVY = ("jax", "flax", "optax", "orbax", "scipy")  # what a config module must not load: building one needs none


def _loads_at_import(start: str) -> dict[str, list[str]]:
    """Every outside package importing module `start` loads, through the imports that run at import time (those
    outside functions, in `start` and in every seedleague module and package `__init__` they reach): its root name
    -> the chain of seedleague modules that leads to it."""
    found, chains, frontier = {}, {start: [start]}, [start]
    while frontier:
        name = frontier.pop()
        path, tree = MODULES[name]
        inside = {id(node) for function in ast.walk(tree)
                  if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) for node in ast.walk(function)}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or id(node) in inside:
                continue
            for _, imported in _imports(name, path, ast.Module([node], [])):
                if imported.split(".")[0] != "seedleague":
                    found.setdefault(imported.split(".")[0], chains[name])
                    continue
                while imported and imported not in MODULES:  # a name in a module: that module
                    imported = imported.rpartition(".")[0]
                parts = imported.split(".")
                for reached in (".".join(parts[:i]) for i in range(1, len(parts) + 1)):  # packages' __init__ too
                    if reached in MODULES and reached not in chains:
                        chains[reached] = chains[name] + [reached]
                        frontier.append(reached)
    return found


CONFIG_MODULES = sorted(name for name in MODULES
                        if name.rpartition(".")[2] == "config" or name.endswith("_config"))


def test_every_components_config_module_loads_no_jax_nor_scipy():
    # A component's config lives in a jax-free *_config module beside it (docs/architecture.md, "Import rules"), so
    # `seedleague train --help` and a refused command line build their configs without loading jax.
    assert {"seedleague.host.config", "seedleague.rl.learner_config", "seedleague.launch.run_config",
            "seedleague.checkpoint_config", "seedleague.artifacts.output_config"} <= set(CONFIG_MODULES)
    assert "jax" in _loads_at_import("seedleague.launch.local")  # the walk follows chains (local -> host -> jax)
    wrong = [f"{name} loads {heavy} through {' -> '.join(chain)}" for name in CONFIG_MODULES
             for heavy, chain in _loads_at_import(name).items() if heavy in HEAVY]
    assert not wrong, "; ".join(wrong) + " (keep the config's module free of them: import the config, not its component)"


def _parser_modules() -> list[str]:
    """The modules seedleague.cli._parser_module imports: those that add the subcommands' flags."""
    path, tree = MODULES["seedleague.cli"]
    function = next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "_parser_module")
    return sorted({imported for _, imported in _imports("seedleague.cli", path, function) if imported in MODULES})


def test_every_commands_flags_load_no_jax_nor_scipy():
    # `seedleague --help` imports all of them, a command's --help and argparse's refusals its own: a command whose
    # run loads jax adds its flags from a module of its own beside it (eval/cli_args.py beside eval/cli.py).
    modules = _parser_modules()
    assert {"seedleague.eval.cli_args", "seedleague.eval.exploit_args", "seedleague.export.cli_args",
            "seedleague.tools.fake_host", "seedleague.league.cli"} <= set(modules)
    wrong = [f"{name} loads {heavy} through {' -> '.join(chain)}" for name in modules
             for heavy, chain in _loads_at_import(name).items() if heavy in HEAVY]
    assert not wrong, "; ".join(wrong) + " (move the command's add_parser into a module beside it that imports neither)"


_HELP = """
import sys
from seedleague import cli
try:
    cli.main(["--help"])
except SystemExit as stop:
    print("exit", stop.code, sorted({n.partition(".")[0] for n in sys.modules} & set(sys.argv[1:])), file=sys.stderr)
"""


def test_the_top_level_help_loads_no_jax_nor_scipy():
    # What really runs, in a fresh interpreter: every command's add_parser, and any import they make when called.
    done = subprocess.run([sys.executable, "-c", _HELP, *HEAVY], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "usage: seedleague" in done.stdout, done.stderr[-2000:]
    assert "exit 0 []" in done.stderr, (f"`seedleague --help` says {done.stderr[-200:]!r}, not exit 0 with none of "
                                        f"{HEAVY}: find the command whose flags load it with `python -X importtime "
                                        "-m seedleague.cli --help`")



_REFUSED = [["exploit", "--run-dir", "/nonexistent/run"], ["exploit", "--run-dir", ".", "--max-seconds", "0"],
            ["exploit", "--run-dir", ".", "--workers", "0"], ["export", "--run-dir", ".", "--out", "policy.txt"],
            ["export", "--run-dir", "/nonexistent/run", "--out", "policy.onnx"],
            ["export", "--run-dir", ".", "--out", "policy.onnx", "--snapshot", "main"],
            ["eval", "--run-dir", ".", "--mixture", "main:1"], ["eval", "--run-dir", ".", "--average", "2"],
            ["eval", "--run-dir", ".", "--games", "0"],
            ["eval", "--run-dir", ".", "--snapshot", "main:000001", "--step", "3"],
            ["report", "--run-dir", "/nonexistent/run"]]
_REFUSE = """
import json, sys
from seedleague import cli
from seedleague.eval import exploit_args
for argv in json.loads(sys.argv[1]) + [["--help"]]:
    try:
        status = cli.main(argv) if argv[0] != "--help" else exploit_args.main(argv)
    except SystemExit as stop:
        status = stop.code
        if isinstance(status, str):  # SystemExit(message), serve's: the interpreter prints it and exits 1
            print(status, file=sys.stderr)
            status = 1
    loaded = sorted({n.partition(".")[0] for n in sys.modules} & set(sys.argv[2:]))
    print("status", status, "loads", loaded, "after", " ".join(argv), file=sys.stderr)
"""


def _refused_by_files(root) -> list[tuple[list[str], int]]:
    """Command lines refused for what a run's files lack (seedleague.artifacts.run_files), with their exit status:
    runs under `root` without a checkpoint, an output or the snapshot named."""
    empty, waiting, pooled = (str(root / name) for name in ("empty", "waiting", "pooled"))
    os.makedirs(empty)
    os.makedirs(os.path.join(waiting, "checkpoints"))
    os.makedirs(os.path.join(pooled, "pool", "main"))
    return [(["eval", "--run-dir", empty], 2), (["eval", "--run-dir", empty, "--checkpoint", waiting], 2),
            (["eval", "--run-dir", empty, "--snapshot", "main:000001"], 2),
            (["eval", "--run-dir", pooled, "--snapshot", "main:000001"], 2),
            (["export", "--run-dir", empty, "--out", "policy.onnx"], 2),
            (["export", "--run-dir", waiting, "--out", "policy.onnx"], 2),
            (["export", "--run-dir", pooled, "--out", "policy.onnx", "--snapshot", "main:000001"], 2),
            (["serve", "--checkpoint", empty], 1), (["serve", "--checkpoint", waiting], 1),
            (["serve", "--checkpoint", pooled, "--snapshot", "main:000001"], 1),
            (["exploit", "--run-dir", empty], 2), (["exploit", "--run-dir", waiting, "--output", "final"], 2)]


def test_a_refused_command_line_of_a_command_that_loads_jax_loads_none(tmp_path):
    # Each is refused before its command's module (or the compile cache) loads jax: seedleague.cli asks the flags'
    # module (refusal), and so does `python -m seedleague.eval.exploit_args`, whose --help closes the list. A run
    # directory without what the command reads is refused so too, where its file names show it (serve's refusal
    # is a SystemExit message: status 1).
    refused = [(argv, 2) for argv in _REFUSED] + _refused_by_files(tmp_path)
    done = subprocess.run([sys.executable, "-c", _REFUSE, json.dumps([argv for argv, _ in refused]), *HEAVY],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    lines = [line for line in done.stderr.splitlines() if line.startswith("status")]
    assert len(lines) == len(refused) + 1, done.stderr[-2000:]
    refusals = [line for line in done.stderr.splitlines() if line.startswith("seedleague ")]
    assert len(refusals) == len(refused), done.stderr[-2000:]  # one console line each, naming its command
    for line, refusal, (argv, status) in zip(lines, refusals, refused):
        assert line.startswith(f"status {status} loads []"), f"`seedleague {' '.join(argv)}`: {line}"
        assert refusal.startswith(f"seedleague {argv[0]}: "), (argv, refusal)
    assert lines[-1].startswith("status 0 loads []"), lines[-1]
    assert not os.path.exists(os.path.join(ROOT, "policy.onnx"))
