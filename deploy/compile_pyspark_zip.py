"""Add bytecode to the pyspark.zip of a pip-installed PySpark, in place.

Every Python process Spark starts (a task's worker daemon, and on the driver one process per Python data
source planning step: lookup, create, the streaming source's runner, the read plan) finds ``pyspark`` on
``$SPARK_HOME/python/lib/pyspark.zip`` ahead of site-packages. That zip holds sources only, and Python
cannot cache bytecode inside a zip, so each of those processes compiles the part of PySpark it imports
again: about 0.4 s each, about 2 s of a job's start. Beside each module this writes its bytecode as an
unchecked hash-based ``.pyc`` (the zip's entries carry no modification times worth checking), which
zipimport loads in place of the source. A Python of another version finds the magic number wrong and
reads the source as before. Running it again does nothing.

    python deploy/compile_pyspark_zip.py [path/to/pyspark.zip]
"""

from __future__ import annotations

import importlib.util
import marshal
import os
import sys
import warnings
import zipfile
from pathlib import Path

_UNCHECKED_HASH = (0b01).to_bytes(4, "little")  # PEP 552 flags: hash-based, not checked against the source


def installed_zip() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "python" / "lib" / "pyspark.zip"


def _bytecode(source: bytes, name: str) -> bytes:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)  # PySpark's own literal comparisons; not ours to report
        code = compile(source, name, "exec", dont_inherit=True)
    return importlib.util.MAGIC_NUMBER + _UNCHECKED_HASH + importlib.util.source_hash(source) + marshal.dumps(code)


def compile_zip(path: Path) -> int:
    """The number of modules given bytecode; 0 when the zip has it already."""
    with zipfile.ZipFile(path) as zin:
        if any(name.endswith(".pyc") for name in zin.namelist()):
            return 0
        partial = path.with_name(path.name + ".partial")
        count = 0
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as zout:
            for info in zin.infolist():
                data = zin.read(info)
                zout.writestr(info, data)
                if info.filename.endswith(".py") and "/tests/" not in info.filename:
                    zout.writestr(info.filename + "c", _bytecode(data, info.filename))
                    count += 1
    os.replace(partial, path)  # a process starting meanwhile reads the old zip or the new one, whole
    return count


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else installed_zip()
    done = compile_zip(target)
    print(f"{target}: {done} modules compiled" if done else f"{target}: already compiled")
