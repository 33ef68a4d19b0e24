"""A store that dies part-way: the crash points of a table service or a rollback, one mutating call at a time."""

from __future__ import annotations

from laketide.table import FileIO


class SimulatedCrash(Exception):
    pass


class CrashingFileIO(FileIO):
    """A real FileIO that dies at its ``budget``-th mutating call, before or after doing it."""

    def __init__(self, io: FileIO, budget: int, after: bool):
        super().__init__(io.fs, io.base_path)
        self.budget, self.after, self.calls = budget, after, 0

    def _step(self, action):
        self.calls += 1
        if self.calls == self.budget and not self.after:
            raise SimulatedCrash(self.calls)
        result = action()
        if self.calls == self.budget and self.after:
            raise SimulatedCrash(self.calls)
        return result

    def write_atomic(self, rel, data, overwrite=False):
        return self._step(lambda: super(CrashingFileIO, self).write_atomic(rel, data, overwrite))

    def delete(self, rel):
        return self._step(lambda: super(CrashingFileIO, self).delete(rel))

    def create_exclusive(self, rel, data):
        return self._step(lambda: super(CrashingFileIO, self).create_exclusive(rel, data))
