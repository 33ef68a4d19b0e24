"""Writes ``typings/pyarrow/compute.pyi``, the type checker's view of ``pyarrow.compute``.

pyarrow makes most of ``pyarrow.compute``'s functions at import time, from the C++ function registry, so a checker
that reads its source sees none of them (every ``pc.equal`` was "not a known attribute"). The stub names every
public function and class the installed pyarrow has, each taking and returning anything: a misspelt function is
caught, argument types are not. ``tests/project/test_packaging.py`` checks that it matches the installed pyarrow.

    .venv/bin/python tests/support/compute_stub.py > typings/pyarrow/compute.pyi
"""

from __future__ import annotations

import keyword
import types

import pyarrow
import pyarrow.compute as pc


def stub() -> str:
    classes, functions, values = [], [], []
    # ``and`` and ``or`` are names pyarrow gives only through getattr (``and_``, ``or_`` are the usable ones)
    for name in sorted(n for n in dir(pc) if not n.startswith("_") and not keyword.iskeyword(n)):
        value = getattr(pc, name)
        if isinstance(value, types.ModuleType):
            continue
        if isinstance(value, type):
            classes.append(f"class {name}(Any): ...")
        elif callable(value):
            functions.append(f"def {name}(*args: Any, **kwargs: Any) -> Any: ...")
        else:
            values.append(f"{name}: Any")
    head = [
        f"# pyarrow.compute as pyarrow {pyarrow.__version__} has it: "
        "made by tests/support/compute_stub.py, do not edit",
        "from typing import Any",
    ]
    return "\n\n".join("\n".join(part) for part in (head, classes, functions, values) if part) + "\n"


if __name__ == "__main__":
    print(stub(), end="")
