"""The commit fence: what makes completing an instant safe against a paused, stale writer.

A lease check before the commit write is not enough: a writer can pass the
check, stop (a GC pause, SIGSTOP, a frozen VM) past its session timeout, and
wake up after a new holder has rolled its instant back. So the decision to
complete an instant is itself an atomic create-if-absent on the table's
storage, and a new holder takes two steps before it touches anything:

1. It records its epoch: ``.hoodie/.laketide/epochs/<epoch>``. A writer about
   to decide checks that no higher epoch exists, so an instant begun after the
   new holder looked at the timeline can never complete.
2. For each instant it recovers, it creates ``.hoodie/.laketide/outcomes/<instant>``
   saying "rolled back". The writer's completing step creates the same file
   saying "committed", with the full commit metadata. Exactly one create wins.
   If the writer won, the new holder completes the instant from the outcome
   file instead of rolling it back; if the new holder won, the writer gives up.

An outcome file lives only while its instant is pending: it is removed once
the instant is completed or its rollback has removed the instant's timeline
files, and a writer that decides after that finds its instant gone.
"""

from __future__ import annotations

import base64
import json
import posixpath
from dataclasses import dataclass

from laketide.coordinator.lease import LeaseLost
from laketide.table.storage.io import FileIO

FENCE_DIR = ".hoodie/.laketide"
EPOCHS_DIR = posixpath.join(FENCE_DIR, "epochs")
OUTCOMES_DIR = posixpath.join(FENCE_DIR, "outcomes")
COMMITTED, ROLLED_BACK = "committed", "rolled_back"


@dataclass(frozen=True)
class Outcome:
    instant: str
    outcome: str
    epoch: int
    metadata: bytes = b""

    def to_bytes(self) -> bytes:
        # a version 6 commit's metadata is JSON text, kept readable; a version 8 one is Avro, kept as base64
        try:
            body = {"metadata": self.metadata.decode()}
        except UnicodeDecodeError:
            body = {"metadata_base64": base64.b64encode(self.metadata).decode()}
        return json.dumps({"instant": self.instant, "outcome": self.outcome, "epoch": self.epoch, **body}).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Outcome:
        raw = json.loads(data)
        if "metadata_base64" in raw:
            metadata = base64.b64decode(raw["metadata_base64"])
        else:
            metadata = raw.get("metadata", "").encode()
        return cls(raw["instant"], raw["outcome"], int(raw["epoch"]), metadata)


class CommitFence:
    def __init__(self, io: FileIO):
        self.io = io

    @staticmethod
    def _outcome_path(instant: str) -> str:
        return posixpath.join(OUTCOMES_DIR, instant)

    def epochs(self) -> list[int]:
        return sorted(int(e.name) for e in self.io.list_dir(EPOCHS_DIR) if not e.is_dir and e.name.isdigit())

    def raise_to(self, epoch: int) -> None:
        """Record ``epoch`` as the newest holder's, before it reads the timeline to recover."""
        newest = max(self.epochs(), default=0)
        if newest > epoch:
            raise LeaseLost(f"epoch {newest} has begun on this table; the lease of epoch {epoch} is stale")
        self.io.create_exclusive(posixpath.join(EPOCHS_DIR, f"{epoch:012d}"), b"")
        for old in self.epochs():
            if old < epoch:
                self.io.delete(posixpath.join(EPOCHS_DIR, f"{old:012d}"))

    def decide_commit(self, instant: str, epoch: int, metadata: bytes) -> None:
        """The point of no return of a commit; raises ``LeaseLost`` when a newer holder got there first."""
        newest = max(self.epochs(), default=0)
        if newest > epoch:
            raise LeaseLost(
                f"epoch {newest} has begun on this table; the writer of epoch {epoch} may not complete {instant}"
            )
        mine = Outcome(instant, COMMITTED, epoch, metadata)
        if not self.io.create_exclusive(self._outcome_path(instant), mine.to_bytes()):
            found = self.outcome(instant)
            if found is None or found != mine:  # not an earlier attempt of this same decision
                raise LeaseLost(
                    f"{instant} was claimed by a newer lease holder ({found.outcome if found else 'gone'}); it "
                    "is not completed"
                )

    def claim_rollback(self, instant: str, epoch: int) -> Outcome | None:
        """Claim a pending instant for rollback; returns its writer's decision if that came first."""
        if self.io.create_exclusive(self._outcome_path(instant), Outcome(instant, ROLLED_BACK, epoch).to_bytes()):
            return None
        found = self.outcome(instant)
        return found if found is not None and found.outcome == COMMITTED else None

    def outcome(self, instant: str) -> Outcome | None:
        try:
            return Outcome.from_bytes(self.io.read_bytes(self._outcome_path(instant)))
        except FileNotFoundError:
            return None

    def decided(self) -> list[str]:
        return sorted(e.name for e in self.io.list_dir(OUTCOMES_DIR) if not e.is_dir and not e.name.startswith("."))

    def forget(self, instant: str) -> None:
        self.io.delete(self._outcome_path(instant))
