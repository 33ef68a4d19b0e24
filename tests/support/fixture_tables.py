"""The tables the suite starts from: Apache Hudi's Spark writer's (``../shared/fixtures``) and Hudi 1.x's, from
hudi-rs's test data (``tests/fixtures/hudi-1x/README.md``)."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

# the repository, and the helpers the suite runs as scripts (jobs, readers, a failing task's site)
REPO = Path(__file__).resolve().parents[2]
SUPPORT = REPO / "tests" / "support"
FIXTURES = Path(os.environ.get("LAKETIDE_FIXTURES", REPO.parent / "shared" / "fixtures"))
SPARK_TABLES = FIXTURES / "hudi-spark-tables"
COW_FIXTURES = [
    "v6_simplekeygen_nonhivestyle",
    "v6_simplekeygen_hivestyle_no_metafields",
    "v8_simplekeygen_nonhivestyle",
]
MOR_FIXTURE = "v6_trips_8i1u"
HUDI_1X = REPO / "tests" / "fixtures" / "hudi-1x"


def unzip_fixture(name: str, dest: Path) -> Path:
    """Unzip table ``name`` (from the Hudi 1.x corpus, else the Spark-written fixtures) into ``dest``."""
    archive = HUDI_1X / f"{name}.zip"
    if not archive.exists():
        archive = SPARK_TABLES / f"{name}.zip"
    if not archive.exists():
        raise FileNotFoundError(f"fixture {archive} is missing; set LAKETIDE_FIXTURES to the fixtures folder")
    with zipfile.ZipFile(archive) as zf:
        members = [m for m in zf.namelist() if not m.startswith("__MACOSX")]
        zf.extractall(dest, members)
    return dest / name
