"""The layers design.md declares: pyspark is imported only in ``spark/``."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from fixture_tables import REPO

ROOT = REPO
SPARK_FREE = ["table", "index", "coordinator", "writer", "api", "config", "catalog"]

BLOCK_PYSPARK = """
import importlib, pkgutil, sys

class NoPyspark:
    def find_spec(self, name, path=None, target=None):
        if name == "pyspark" or name.startswith("pyspark."):
            raise ImportError(f"pyspark is blocked here, but {{name}} was imported")
        return None

sys.meta_path.insert(0, NoPyspark())
import laketide
modules = ["laketide", "laketide.cli", "laketide.config", "laketide.service"]
for package in {packages}:
    pkg = importlib.import_module(f"laketide.{{package}}")
    modules += [m.name for m in pkgutil.walk_packages(pkg.__path__, f"laketide.{{package}}.")]
for name in modules:
    importlib.import_module(name)
print(len(modules))
"""


def test_everything_outside_spark_imports_without_pyspark():
    """Every module of the Spark-free core, the API, the CLI and the config imports with pyspark blocked."""
    done = subprocess.run(
        [sys.executable, "-c", BLOCK_PYSPARK.format(packages=SPARK_FREE)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.strip()) > 40


def test_the_laketide_write_api_runs_without_pyspark(tmp_path):
    """Not only importing: ``laketide.write`` writes a table with pyspark blocked."""
    script = (
        BLOCK_PYSPARK.format(packages=[])
        + f"""
import pyarrow as pa
report = laketide.write({str(tmp_path / "t")!r}, pa.table({{"id": [1, 2], "v": ["a", "b"]}}), record_key="id")
assert report.inserts == 2, report
"""
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


SOURCE_FOLDERS = ["src/laketide", "table", "index", "writer", "coordinator", "catalog", "spark", "api"]


def _source_modules():
    """Every source module with its parsed tree, sub-packages included; ``src/laketide``'s links to the other
    folders are not followed (each module is read once, by its folder)."""
    for folder in SOURCE_FOLDERS:
        for where, _, files in os.walk(ROOT / folder):
            for name in sorted(f for f in files if f.endswith(".py")):
                path = Path(where) / name
                yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text())


def test_one_writer_session_and_no_subclass_of_the_core():
    """Every writer is made by ``WriterSession`` (the only place that builds a ``BatchWriter`` or takes a table's
    lease for writing), and no adapter subclasses the core's writer: adapters compose it."""
    builders, subclasses = set(), set()
    for name, tree in _source_modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and any(
                getattr(base, "id", getattr(base, "attr", None)) == "BatchWriter" for base in node.bases
            ):
                subclasses.add(f"{name}:{node.name}")
            if isinstance(node, ast.Call):
                called = getattr(node.func, "id", getattr(node.func, "attr", None))
                if called in ("BatchWriter", "make_lease"):
                    builders.add(name)
    assert not subclasses
    assert builders == {"writer/job/session.py"}


# what each part of table/ may import of laketide: the part below it, never one above (imports for type checking
# alone are exempt); ``errors`` and ``lru`` are table/'s own modules, ``table`` its ``Table``
TABLE_LAYERS = {
    "storage": {"storage", "errors"},
    "format": {"format", "storage", "errors"},
    "reading": {"reading", "format", "storage", "errors", "lru"},
    "mirror": {"mirror", "format", "storage", "errors"},
    "inspect": {"inspect", "reading", "format", "storage", "errors", "lru", "table"},
}


def _runtime_imports(tree: ast.Module) -> set[str]:
    """The modules a module imports when it runs: every import but those under ``if TYPE_CHECKING:``."""
    skipped = {
        id(node)
        for test in ast.walk(tree)
        if isinstance(test, ast.If) and getattr(test.test, "id", None) == "TYPE_CHECKING"
        for statement in test.body
        for node in ast.walk(statement)
    }
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def _allowed(module: str, allowed: set[str]) -> bool:
    """Whether a module of a part of ``table/`` may import ``module`` (of laketide): one of its ``allowed`` parts, or a
    part's package alone (``from laketide.table.format import view`` names the package, then the module)."""
    names = module.split(".")
    if names[:2] != ["laketide", "table"] or len(names) == 2:
        return False
    return names[2] in allowed or (len(names) == 3 and names[2] in TABLE_LAYERS)


def test_table_parts_import_only_the_parts_below_them():
    """``table/`` by concern: storage, then the format, then reading and the mirror, then inspect; nothing in
    ``table/`` imports the rest of laketide."""
    wrong = []
    for part, allowed in TABLE_LAYERS.items():
        for path in sorted((ROOT / "table" / part).glob("*.py")):
            for module in _runtime_imports(ast.parse(path.read_text())):
                if not module.startswith("laketide"):
                    continue
                if not _allowed(module, allowed):
                    wrong.append(f"table/{part}/{path.name} imports {module}")
    assert not wrong, "\n".join(wrong)


# writer/ by concern: the change feeds' decoding and Hudi's file writers know nothing of the micro-batch core at
# the folder's root; the core takes both; a writer's life (job/) is built on all three
WRITER_WINGS = ("changes", "files", "job")
WRITER_LAYERS = {
    "changes": {"changes"},
    "files": {"files"},
    "": {"", "changes", "files"},
    "job": {"job", "", "changes", "files"},
}


def _wing(module: str) -> str | None:
    """The part of ``writer/`` a module of it is in (``""``: the core at its root); ``None`` for any other."""
    names = module.split(".")
    if names[:2] != ["laketide", "writer"] or len(names) < 3:
        return None
    return names[2] if names[2] in WRITER_WINGS else ""


def test_writer_wings_import_only_the_parts_below_them():
    """``writer/changes/`` and ``writer/files/`` import nothing of the core; the core nothing of ``writer/job/``."""
    wrong = []
    for path in sorted((ROOT / "writer").rglob("*.py")):
        relative = path.relative_to(ROOT / "writer")
        part = relative.parts[0] if len(relative.parts) > 1 else ""
        for module in _runtime_imports(ast.parse(path.read_text())):
            wing = _wing(module)
            if wing is not None and wing not in WRITER_LAYERS[part]:
                wrong.append(f"writer/{relative} imports {module}")
    assert not wrong, "\n".join(wrong)


def test_the_config_imports_nothing_of_the_writer_or_above():
    """``config/`` is one package under everything that reads it: it takes the table's format and the index's
    column names, nothing of the coordinator, the writer or the adapters."""
    wrong = []
    for path in sorted((ROOT / "src" / "laketide" / "config").glob("*.py")):
        for module in _runtime_imports(ast.parse(path.read_text())):
            names = module.split(".")
            if names[0] == "laketide" and len(names) > 1 and names[1] not in ("config", "table", "index"):
                wrong.append(f"config/{path.name} imports {module}")
    assert not wrong, "\n".join(wrong)


def test_test_modules_import_helpers_never_each_other():
    """A test module takes what it shares from ``tests/support/``: importing another test module works only when
    both sit in one folder on ``sys.path``, so it breaks as soon as one moves (and runs the other's module setup)."""
    wrong = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            wrong += [f"{path.relative_to(ROOT)}: {name}" for name in names if name.startswith(("test_", "conftest"))]
    assert not wrong, wrong


# what each top-level part of laketide may import of the others (design.md's table; ``catalog`` beside ``index``),
# in function bodies too: a lazy import is still a dependency
TOP_LAYERS = {
    "table": set(),
    "index": {"table"},
    "coordinator": {"table", "index"},
    "catalog": {"table"},
    "config": {"table", "index"},
    "writer": {"table", "index", "coordinator", "catalog", "config"},
    "api": {"table", "coordinator", "writer", "config"},
}


def test_top_level_parts_import_only_the_parts_below_them():
    wrong = []
    for part, allowed in TOP_LAYERS.items():
        folder = ROOT / ("src/laketide/config" if part == "config" else part)
        for path in sorted(folder.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                modules = (
                    [node.module or ""]
                    if isinstance(node, ast.ImportFrom)
                    else [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else []
                )
                for module in modules:
                    names = module.split(".")
                    if names[0] == "laketide" and len(names) > 1 and names[1] not in {part, *allowed}:
                        wrong.append(f"{path.relative_to(ROOT)} imports {module}")
    assert not wrong, wrong
