"""The installed project as tools see it: every ``laketide.*`` package resolves to its source file by path, as a
language server's "go to definition" and a type checker need (``make install`` writes ``src`` into the venv's
path; the top-level folders are laketide's sub-packages through the links in ``src/laketide``)."""

import json
import os
import subprocess
import sys
from pathlib import Path

from fixture_tables import REPO

ROOT = REPO
PACKAGES = ["table", "index", "writer", "coordinator", "spark", "api", "catalog"]


def test_every_subpackage_is_the_top_level_folder_of_its_name():
    for name in PACKAGES:
        link = ROOT / "src" / "laketide" / name
        assert link.is_symlink() and link.resolve() == ROOT / name, name


def test_the_install_puts_a_path_on_sys_path_not_an_import_hook():
    """An editable install that maps packages with an import hook leaves path-based tools with nothing to follow."""
    done = subprocess.run(
        [sys.executable, "-c", "import laketide.table, sys; print(laketide.table.__file__); print(sys.meta_path)"],
        capture_output=True,
        text=True,
        check=True,
    )
    location, finders = done.stdout.splitlines()
    assert Path(location).resolve() == ROOT / "table" / "__init__.py"
    assert "editable" not in finders.lower()


def test_a_type_checker_resolves_every_laketide_import_to_its_source(tmp_path):
    """pyright, which language servers are built on, reads each module's own signatures: no import is missing and
    a revealed type is the source's, not Unknown."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from laketide.table import Table\n"
        "from laketide.index.bloom import BloomSpec\n"
        "from laketide.writer.bulk_stage import bulk_order\n"
        "from laketide.coordinator import Coordinator\n"
        "from laketide.spark.job import run\n"
        "from laketide.api.app import create_app\n"
        "from laketide.config import JobConfig\n"
        "reveal_type(Table.open)\n"
        "reveal_type(bulk_order)\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pyright", "--outputjson", "--pythonpath", sys.executable, str(probe)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    report = json.loads(done.stdout)
    missing = [
        d["message"]
        for d in report["generalDiagnostics"]
        if d.get("rule") in ("reportMissingImports", "reportAttributeAccessIssue")
    ]
    assert not missing, missing
    revealed = [d["message"] for d in report["generalDiagnostics"] if d["severity"] == "information"]
    assert any("io: FileIO | None" in m for m in revealed), revealed
    assert any("ordering_field" in m for m in revealed), revealed


def test_the_type_checkers_view_of_pyarrow_compute_is_the_installed_pyarrows():
    """``typings/pyarrow-stubs/compute.pyi`` names what the installed pyarrow makes at import time: regenerate it
    (``tests/support/compute_stub.py``) after a pyarrow upgrade."""
    from compute_stub import stub

    assert (ROOT / "typings" / "pyarrow-stubs" / "compute.pyi").read_text() == stub()


def test_the_compiled_hashing_loads_from_the_zip_spark_submit_ships(tmp_path):
    """``deploy/spark-submit.sh`` ships the wheel as a .zip, which Python cannot load a shared library from: the
    key hashing's C module is copied out of it once and loaded, and its filters are the installed package's."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("laketide-*.whl")
    archive = wheel.with_suffix(".zip")
    wheel.rename(archive)
    probe = (
        "import sys\n"
        f"sys.path = [{str(archive)!r}] + [p for p in sys.path if p not in ('', {str(ROOT / 'src')!r})]\n"
        "from laketide.index import hashing\n"
        "from laketide.index.bloom import BloomFilter\n"
        "print(hashing.__file__)\n"
        "print(hashing.compiled.__file__)\n"
        "print(BloomFilter.for_keys([f'key-{i}' for i in range(1000)]).serialize())\n"
    )
    unpacked = tmp_path / "tmp"
    unpacked.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        env={**os.environ, "TMPDIR": str(unpacked)},
    )
    module, compiled, serialized = done.stdout.splitlines()
    assert module.startswith(str(archive))
    assert Path(compiled).parent.parent == unpacked
    from laketide.index.bloom import BloomFilter

    assert serialized == BloomFilter.for_keys([f"key-{i}" for i in range(1000)]).serialize()
