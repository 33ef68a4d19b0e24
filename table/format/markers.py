"""Write markers: one empty file per data file an instant writes, made before the data file.

Hudi's direct markers: ``.hoodie/.temp/<instant>/<partition>/<data file name>.marker.<IO type>``
(``DirectWriteMarkers``, ``WriteMarkers.getMarkerPath``). They name every file
a write attempt may have left, so a commit deletes what its winning write
statuses do not name, and a rollback, Hudi's or ours, finds every file of a
failed instant, including files a stale writer wrote after it was rolled back.
"""

from __future__ import annotations

import os
import posixpath
import time
from dataclasses import dataclass

from laketide.table.storage.io import FileIO

TEMP_DIR = ".hoodie/.temp"
MARKER_EXTENSION = ".marker."
CREATE, MERGE, APPEND = "CREATE", "MERGE", "APPEND"
# A test hook, off unless set: a folder in which an ``armed`` file makes the next marker's writer stop
# between its marker and its data file until ``release`` appears; text in ``armed`` limits it to a data
# file whose path holds that text (``.log.``: a log file). Timing luck cannot reproduce that
# interleaving; the chaos tests need it.
FREEZE_AFTER_MARKER_ENV = "LAKETIDE_TEST_FREEZE_AFTER_MARKER"


@dataclass(frozen=True)
class Marker:
    path: str  # of the marker, relative to the table
    data_path: str  # of the data file it stands for, relative to the table
    io_type: str
    mtime_ns: int = 0


class WriteMarkers:
    """The markers of one instant."""

    def __init__(self, io: FileIO, instant_time: str):
        self.io = io
        self.instant_time = instant_time
        self.dir = posixpath.join(TEMP_DIR, instant_time)

    def create(self, data_path: str, io_type: str) -> str:
        """Mark ``data_path`` (relative to the table) as about to be written by this instant."""
        path = posixpath.join(self.dir, f"{data_path}{MARKER_EXTENSION}{io_type}")
        self.io.write_bytes(path, b"")
        _freeze_point(data_path)
        return path

    def markers(self) -> list[Marker]:
        found = []
        for entry in self.io.walk(self.dir):
            if entry.is_dir or MARKER_EXTENSION not in entry.name:
                continue
            data_path, _, io_type = posixpath.relpath(entry.path, self.dir).rpartition(MARKER_EXTENSION)
            found.append(Marker(entry.path, data_path, io_type, entry.mtime_ns))
        return found

    def data_paths(self) -> set[str]:
        """Data files the instant's attempts may have written (appends are to existing logs, never new files)."""
        return {m.data_path for m in self.markers() if m.io_type != APPEND}

    def delete_all(self) -> None:
        self.io.delete_dir(self.dir)


def marked_instants(io: FileIO) -> list[str]:
    """Instants with a marker folder: in flight, or left by a write that did not finish cleanly."""
    return sorted(e.name for e in io.list_dir(TEMP_DIR) if e.is_dir)


def _freeze_point(data_path: str) -> None:
    folder = os.environ.get(FREEZE_AFTER_MARKER_ENV)
    if not folder:
        return
    try:
        with open(os.path.join(folder, "armed")) as armed:
            if armed.read() not in data_path:
                return
        os.rename(os.path.join(folder, "armed"), os.path.join(folder, "freezing"))  # only one writer freezes
    except FileNotFoundError:
        return
    with open(os.path.join(folder, "freezing"), "w") as f:
        f.write(data_path)
    os.rename(os.path.join(folder, "freezing"), os.path.join(folder, "frozen"))
    while not os.path.exists(os.path.join(folder, "release")):
        time.sleep(0.02)
