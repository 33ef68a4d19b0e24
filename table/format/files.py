"""Names of the files in a table's partitions: base files, log files, partition metadata."""

from __future__ import annotations

import posixpath
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

BASE_FILE_EXTENSION = ".parquet"
PARTITION_METADATA = ".hoodie_partition_metadata"
# Top-level directories a reader never lists as partitions.
RESERVED_TOP_DIRS = frozenset({".hoodie", "_delta_log", "metadata"})

_LOG_NAME = re.compile(r"^\.(?P<file_id>[^_]+)_(?P<instant>\d+)\.log\.(?P<version>\d+)_(?P<token>.+)$")


def new_file_id() -> str:
    """A new file group id as Hudi makes them: a random UUID plus ``-0``."""
    return f"{uuid.uuid4()}-0"


def write_token(task_partition: int, stage: int = 0, attempt: int = 0) -> str:
    return f"{task_partition}-{stage}-{attempt}"


def log_write_token(token: str, instant_time: str) -> str:
    """A log file's write token: ``token`` with its stage part taken from the instant writing it.

    A log file's name carries its slice and version but not its instant, and a micro-batch replayed
    after a rollback writes the same slices at the same versions from the same task slots. A task of
    the rolled-back instant that wakes late would then write over the replay's committed log, and the
    sweep, finding the rolled-back instant's marker, would delete it. With the instant in the token the
    two names differ. Hudi parses each part of a token as an int (``getStageIdFromLogPath`` and its
    neighbours in hudi-common/.../common/fs/FSUtils.java), so the stage part is the
    instant's time of day (HHmmssSSS, below 2^31): two instants share it only when they are whole days
    apart to the millisecond."""
    task_partition, _, attempt = token.split("-")
    return write_token(int(task_partition), int(instant_time[8:]), int(attempt))


class _DataFile:
    """A file in a partition; ``path`` is relative to the table base path."""

    partition: str

    @property
    def name(self) -> str:
        raise NotImplementedError

    @property
    def path(self) -> str:
        # not posixpath.join: a partition path never ends in "/" nor a name starts with one, and a slice's
        # files are named on every micro-batch
        return f"{self.partition}/{self.name}" if self.partition else self.name


@dataclass(frozen=True)
class BaseFile(_DataFile):
    partition: str
    file_id: str
    write_token: str
    instant_time: str
    size: int = 0

    @property
    def name(self) -> str:
        return f"{self.file_id}_{self.write_token}_{self.instant_time}{BASE_FILE_EXTENSION}"

    @classmethod
    def parse(cls, partition: str, name: str, size: int = 0) -> BaseFile:
        stem = name[: -len(BASE_FILE_EXTENSION)]
        parts = stem.split("_")
        if len(parts) != 3 or not all(parts):
            raise ValueError(
                f"{posixpath.join(partition, name)} is not a base file name <fileId>_<writeToken>_<instant>.parquet"
            )
        return cls(partition, parts[0], parts[1], parts[2], size)


@dataclass(frozen=True)
class LogFile(_DataFile):
    partition: str
    file_id: str
    base_instant: str
    version: int
    write_token: str
    size: int = 0

    @property
    def name(self) -> str:
        return f".{self.file_id}_{self.base_instant}.log.{self.version}_{self.write_token}"

    @property
    def order(self) -> tuple[str, int, str]:
        """Where this file's blocks apply among a slice's logs, as Hudi orders them (hudi-common
        ``HoodieLogFile.LogFileComparator``): by the instant it is named by, then version, then write token. A
        version 8 slice holds logs named by several deltacommits, whose write tokens start with whichever task
        wrote them: ordered by token alone, an older deltacommit's upsert could land after a newer delete."""
        return (self.base_instant, self.version, self.write_token)

    @classmethod
    def parse(cls, partition: str, name: str, size: int = 0) -> LogFile | None:
        m = _LOG_NAME.match(name)
        if not m:
            return None
        return cls(partition, m["file_id"], m["instant"], int(m["version"]), m["token"], size)


def parse_data_file(partition: str, name: str, size: int = 0) -> BaseFile | LogFile | None:
    """The base or log file a name in a partition is; ``None`` for anything else."""
    if name.endswith(BASE_FILE_EXTENSION) and not name.startswith("."):
        return BaseFile.parse(partition, name, size)
    return LogFile.parse(partition, name, size)


def _without_scheme(path: str) -> str:
    if "://" in path:
        return path.split("://", 1)[1]
    return path[len("file:") :] if path.startswith("file:") else path


def table_relative(path: str, partition: str, base_uri: str) -> str:
    """A deleted file as instant metadata names it (a name, a relative path, or an absolute one) relative to the
    table."""
    if "/" not in path:
        return posixpath.join(partition, path) if partition else path
    base = _without_scheme(base_uri).rstrip("/") + "/"
    bare = _without_scheme(path)
    return bare[len(base) :] if bare.startswith(base) else path


def absolute_path(base_uri: str, path: str) -> str:
    """A path relative to the table as Hudi's plans and metadata name files: absolute."""
    return posixpath.join(base_uri, path)


def instant_of_file(name: str) -> str | None:
    """The instant time a data file belongs to, from its name alone."""
    if name.endswith(BASE_FILE_EXTENSION) and not name.startswith("."):
        parts = name[: -len(BASE_FILE_EXTENSION)].split("_")
        return parts[2] if len(parts) == 3 else None
    log = LogFile.parse("", name)
    return log.base_instant if log else None


def partition_metadata(first_instant: str, depth: int) -> bytes:
    now = datetime.now(UTC).strftime("%a %b %d %H:%M:%S UTC %Y")
    return f"#partition metadata\n#{now}\ncommitTime={first_instant}\npartitionDepth={depth}\n".encode()
