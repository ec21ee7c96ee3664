"""Dependencies flow one way, producer -> tasks -> workers -> prism, with no import cycles; the
producer plans nothing heavier than ids; functions stay short and the CLI thin."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]

LAYERS = ["producer", "tasks", "workers", "prism"]


def test_layers_import_only_downwards():
    graph = grimp.build_graph(*LAYERS, cache_dir=None)
    wrong = []
    for i, lower in enumerate(LAYERS):
        for higher in LAYERS[:i]:
            for chain in graph.find_illegal_dependencies_for_layers(layers=[higher, lower], containers=set()):
                wrong.append(f"{chain.importer} -> {chain.imported}")
    assert not wrong, wrong


def test_no_import_cycles():
    graph = grimp.build_graph(*LAYERS, cache_dir=None)
    modules = sorted(graph.modules)
    cycles = []
    for module in modules:
        for imported in graph.find_modules_directly_imported_by(module):
            if graph.chain_exists(imported=module, importer=imported):
                cycles.append(tuple(sorted((module, imported))))
    assert not sorted(set(cycles)), sorted(set(cycles))


def test_the_producer_plans_nothing_heavier_than_ids():
    """Streaming an input and enqueueing its planning tasks: no tokenizer, no chunking, no
    pre-filter, no model, no task module (tasks are sent by name); the fleet's planning tasks do
    that work. Followed through every import, not only the direct ones (an import made for type
    checking alone loads nothing)."""
    graph = grimp.build_graph(*LAYERS, exclude_type_checking_imports=True, cache_dir=None)
    heavy = {
        "prism.segmenting",
        "prism.ranking.strategies.chunks",
        "prism.ranking.hybrid",
        "prism.ranking.embeddings",
        "prism.ranking.prior",
    }
    for planner in ("producer.plan", "producer.questions"):
        reached = graph.find_upstream_modules(planner)
        found = sorted(m for m in reached if m in heavy or m.startswith("tasks"))
        chains = [graph.find_shortest_chain(importer=planner, imported=m) for m in found]
        assert not found, (planner, chains)


def _unit(module: str) -> str:
    """A module's unit for the cycle check: a module of prism/ or of one of its packages, or a
    package's subpackage whole (prism.ranking.strategies)."""
    return ".".join(module.split(".")[:3])


def _imports(path: Path) -> set[str]:
    """Every prism module a file imports, at its top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("prism"):
            # "from prism.llm import batch" imports a module of the package, not its facade
            names = {f"{node.module}.{a.name}" for a in node.names}
            modules = {name for name in names if _is_module(name)}
            found |= modules if modules == names else {node.module or ""}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("prism")}
    return found - {"prism"}


def _is_module(name: str) -> bool:
    path = ROOT / Path(*name.split("."))
    return path.with_suffix(".py").is_file() or path.is_dir()


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def test_no_import_inside_prism_runs_back_up():
    """prism/'s modules form layers: none imports one that imports it back, directly or round a
    loop, a function-local import included."""
    graph: dict[str, set[str]] = {}
    for path in (ROOT / "prism").rglob("*.py"):
        unit = _unit(_module(path))
        graph.setdefault(unit, set()).update(_unit(m) for m in _imports(path) if _unit(m) != unit)
    try:
        order = list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as err:
        raise AssertionError(f"an import runs back up: {' -> '.join(err.args[1])}") from None
    assert "prism.ranking.strategies" in order and "prism.ranking.rankers" in order


SHARED = "prism's shared modules"
MAX_TOP_MODULES = 8


def _packages() -> list[Path]:
    return sorted(p.parent for p in (ROOT / "prism").glob("*/__init__.py"))


def _may_import(package: Path) -> set[str]:
    """What a package's opening says it may import: its docstring's 'May import:' line."""
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    lines = [line for line in doc.splitlines() if line.startswith("May import:")]
    assert len(lines) == 1, f"{package.name}/__init__.py opens with no single 'May import:' line"
    allowed = {name.strip().rstrip(".") for name in lines[0].removeprefix("May import:").split(",")}
    return {name for name in allowed if name}


def _owner(module: str) -> str:
    """The package a prism module belongs to, or SHARED for a module at prism's top."""
    parts = module.split(".")
    return SHARED if (ROOT / "prism" / f"{parts[1]}.py").is_file() else f"prism.{parts[1]}"


def test_each_package_imports_only_what_its_opening_allows():
    """Between prism's packages imports run one way, as each package's opening says; the shared
    modules at prism's top import no package."""
    wrong = []
    for package in _packages():
        allowed = _may_import(package) | {f"prism.{package.name}"}
        assert allowed <= {SHARED} | {f"prism.{p.name}" for p in _packages()}, (package.name, allowed)
        for path in package.rglob("*.py"):
            wrong += [f"{_module(path)} -> {m}" for m in _imports(path) if _owner(m) not in allowed]
    for path in (ROOT / "prism").glob("*.py"):
        wrong += [f"{_module(path)} -> {m}" for m in _imports(path) if _owner(m) != SHARED]
    assert not wrong, wrong


def test_prism_keeps_a_handful_of_modules_at_its_top():
    top = sorted(p.name for p in (ROOT / "prism").glob("*.py") if p.name != "__init__.py")
    assert len(top) <= MAX_TOP_MODULES, top


def test_the_package_check_finds_an_import_that_runs_back_up(tmp_path):
    """The opening's line is what the check reads: a package that may import only the shared
    modules is caught importing another package."""
    (tmp_path / "__init__.py").write_text('"""Pure.\n\nMay import: prism\'s shared modules.\n"""\n')
    assert _may_import(tmp_path) == {SHARED}
    assert _owner("prism.runs.planning") == "prism.runs" and _owner("prism.models") == SHARED


def test_a_run_config_is_resolved_in_one_place():
    """Settings become a RunConfig through producer.config.resolved_config alone: run, enqueue,
    estimate and the benchmarks pin the same prior and fit the same servers."""
    callers = []
    for package in ("producer", "tasks", "workers", "prism", "bench"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "run_config":
                    callers.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert callers == [f"producer/config.py:{_line_of('producer/config.py', '.run_config()')}"], callers


def _line_of(file: str, text: str) -> int:
    return next(i for i, line in enumerate((ROOT / file).read_text().splitlines(), 1) if text in line)


LIMITS = {"producer": 60, "tasks": 60, "workers": 60, "prism": 80}


def test_functions_are_short_and_the_cli_is_thin():
    long = []
    for package, limit in LIMITS.items():
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                    if lines > limit:
                        long.append(f"{path.relative_to(ROOT)}:{node.name} {lines} lines (at most {limit})")
    assert not long, long
    assert len((ROOT / "producer" / "cli.py").read_text().splitlines()) < 400


def test_the_docs_list_a_requests_steps_in_their_order():
    from prism.llm import STEPS

    section = (ROOT / "docs" / "fleet.md").read_text().split("## A request's path", 1)[1].split("\n## ", 1)[0]
    listed = [line.split("`")[1] for line in section.splitlines() if line[:1].isdigit()]
    assert listed == [step.__name__ for step in STEPS]


def test_classes_stay_under_250_lines():
    """Outside the test doubles (prism/testing) and the options' declarations (Settings)."""
    long = []
    for package in LAYERS:
        for path in (ROOT / package).rglob("*.py"):
            if path.is_relative_to(ROOT / "prism" / "testing"):
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef) and (path.name, node.name) != ("settings.py", "Settings"):
                    lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                    if lines > 250:
                        long.append(f"{path.relative_to(ROOT)}:{node.name} {lines} lines")
    assert not long, long


def test_the_commands_that_read_a_run_need_no_fleet():
    """`prism report`, `status`, `eval` and `view` import no Celery and no Runtime, a function-local
    import included: they read a folder or s3:// with no broker."""
    graph = grimp.build_graph(*LAYERS, include_external_packages=True, cache_dir=None)
    for command in ("producer.commands.report", "producer.commands.view"):
        reached = graph.find_upstream_modules(command)
        found = sorted(m for m in reached if m in ("celery", "kombu", "workers.app", "workers.runtime"))
        assert not found, [graph.find_shortest_chain(importer=command, imported=m) for m in found]


# Variables that are not options: the settings file's name, the test suite's and benchmarks' own.
NOT_OPTIONS = {"PRISM_CONFIG", "PRISM_X", "PRISM_TEST_REDIS_DB", "PRISM_BENCH_S3", "PRISM_SHARED_DATA"}


def test_every_variable_a_message_or_page_names_is_an_option():
    """Messages name options through workers.settings.named and flag; whatever still spells a
    PRISM_* variable out (prism/, which cannot import the settings, the docs, the manifests)
    names one Settings declares, so a rename leaves no stale name behind."""
    import re

    from workers.settings import Settings

    declared = {f"PRISM_{name.upper()}" for name in Settings.model_fields} | NOT_OPTIONS
    stale = []
    for pattern in (
        "prism/**/*.py",
        "producer/**/*.py",
        "tasks/**/*.py",
        "workers/**/*.py",
        "docs/*.md",
        "README.md",
        "infra/**/*.yml",
        "infra/**/*.yaml",
        "bench/*.py",
    ):
        for path in ROOT.glob(pattern):
            for name in set(re.findall(r"PRISM_[A-Z0-9_]*[A-Z0-9]", path.read_text())) - declared:
                stale.append(f"{path.relative_to(ROOT)}: {name}")
    assert not stale, stale
