"""The ``laketide`` command as a user runs it: the installed script, in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CLI = str(Path(sys.executable).with_name("laketide"))


def laketide(*args, env=None):
    """``laketide ARGS``: its exit code, stdout and stderr."""
    result = subprocess.run(
        [CLI, *args], capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})}
    )
    return result.returncode, result.stdout, result.stderr
