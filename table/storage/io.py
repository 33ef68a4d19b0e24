"""FileIO: the one seam between laketide and storage.

Everything that touches a table's files goes through ``FileIO``, chosen by the URI's scheme (as
pyiceberg chooses its FileIO): local paths and HDFS through ``pyarrow.fs``, object stores (S3, GCS,
Azure Blob) through ``object_io``. Paths handed to a ``FileIO`` are relative to the table's base path.
"""

from __future__ import annotations

import os
import posixpath
import urllib.parse
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs

from laketide.table.errors import Conflict, Invalid

# schemes served by object_store (``object_io``); ``s3a`` is Hadoop's name for S3
OBJECT_STORE_SCHEMES = frozenset({"s3", "s3a", "gs", "az", "abfs", "abfss", "azure"})


class InstantFileExists(Conflict, FileExistsError):
    """A completed timeline file is never overwritten."""


class NoExclusiveCreate(Invalid, NotImplementedError):
    """The store offers no atomic create-if-absent through this FileIO."""


@dataclass(frozen=True)
class FileEntry:
    path: str  # relative to the table base path
    size: int
    is_dir: bool
    mtime_ns: int = 0

    @property
    def name(self) -> str:
        return posixpath.basename(self.path)


class FileIO:
    # what ``for_uri`` needs, beside the path, to open this storage again (in a Spark task, say): none for a local
    # file system; a store's options (``ObjectStoreFileIO``)
    options: dict[str, str]

    def __init__(self, fs: pafs.FileSystem, base_path: str):
        self.fs = fs
        self.base_path = base_path.rstrip("/")
        self.options = {}

    @classmethod
    def for_uri(cls, uri: str, options: Mapping[str, str] | None = None) -> FileIO:
        """A FileIO rooted at ``uri``, chosen by its scheme: a local path; an object store (``s3://``, ``gs://``,
        ``az://``, ``abfs://``) through ``object_io`` with ``options`` (object_store's keys); else a URI
        pyarrow understands (``hdfs://``)."""
        scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
        if scheme in OBJECT_STORE_SCHEMES:
            from laketide.table.storage.object_io import ObjectStoreFileIO

            return ObjectStoreFileIO(uri, options)
        if uri.startswith("file:"):
            # Hadoop writes local files as file:/path or file:///path, percent-encoded
            uri = urllib.parse.unquote(urllib.parse.urlparse(uri).path)
        if "://" not in uri:
            uri = posixpath.abspath(uri) if not uri.startswith("/") else uri
            return cls(pafs.LocalFileSystem(), uri)
        fs, path = pafs.FileSystem.from_uri(uri)
        return cls(fs, path)

    @property
    def is_local(self) -> bool:
        return isinstance(self.fs, pafs.LocalFileSystem)

    def full_path(self, rel: str) -> str:
        return posixpath.join(self.base_path, rel) if rel else self.base_path

    def _rel(self, full: str) -> str:
        # a listing names paths under the base as it was given: cut the prefix when nothing needs normalising
        # (relpath costs ten times as much, which a listing of 10,000 files feels)
        prefix = self.base_path.rstrip("/") + "/"
        rest = full[len(prefix) :] if full.startswith(prefix) else ""
        if rest and not any(part in ("", ".", "..") for part in rest.split("/")):
            return rest
        return posixpath.relpath(full, self.base_path)

    def exists(self, rel: str) -> bool:
        return self.fs.get_file_info(self.full_path(rel)).type != pafs.FileType.NotFound

    def is_file(self, rel: str) -> bool:
        return self.fs.get_file_info(self.full_path(rel)).type == pafs.FileType.File

    def size(self, rel: str) -> int:
        return self.fs.get_file_info(self.full_path(rel)).size

    def entry(self, rel: str) -> FileEntry:
        return self._entry(self.fs.get_file_info(self.full_path(rel)))

    def read_bytes(self, rel: str) -> bytes:
        with self.fs.open_input_stream(self.full_path(rel)) as f:
            return f.read()

    def read_text(self, rel: str) -> str:
        return self.read_bytes(rel).decode("utf-8")

    def open_input(self, rel: str):
        return self.fs.open_input_file(self.full_path(rel))

    def open_output(self, rel: str):
        # the parent is made only when it is missing: a micro-batch opens a file per file group, marker
        # and log, nearly all in directories that exist, and making the parents first cost as much as the open
        try:
            return self.fs.open_output_stream(self.full_path(rel))
        except FileNotFoundError:
            self.makedirs(posixpath.dirname(rel))
            return self.fs.open_output_stream(self.full_path(rel))

    def makedirs(self, rel: str) -> None:
        self.fs.create_dir(self.full_path(rel), recursive=True)

    def write_bytes(self, rel: str, data: bytes) -> None:
        self.write_parts(rel, [data])

    def write_parts(self, rel: str, parts: Sequence[bytes | pa.Buffer]) -> int:
        """``parts`` one after another as the file ``rel``, never joined in memory; how many bytes that is."""
        with self.open_output(rel) as f:
            for part in parts:
                f.write(part)
        return sum(len(part) for part in parts)

    def write_atomic(self, rel: str, data: bytes, overwrite: bool = False) -> None:
        """Write to a temporary name beside ``rel``, then rename onto it.

        Readers see either no file or the whole file. Without ``overwrite`` an
        existing target is an error: completed instants are immutable.
        """
        if not overwrite and self.exists(rel):
            raise InstantFileExists(f"{self.full_path(rel)} already exists and is never overwritten")
        parent = posixpath.dirname(rel)
        tmp = posixpath.join(parent, f".{posixpath.basename(rel)}.{uuid.uuid4().hex}.tmp")
        self.write_bytes(tmp, data)
        try:
            self.fs.move(self.full_path(tmp), self.full_path(rel))
        except BaseException:
            self.delete(tmp)
            raise

    @property
    def has_exclusive_create(self) -> bool:
        return self.is_local

    def create_exclusive(self, rel: str, data: bytes) -> bool:
        """Create ``rel`` holding ``data`` unless it exists; ``True`` when this call created it.

        Of callers racing for one name exactly one wins, and readers see the
        whole content or no file. Local disks do it with a hard link, which
        fails when the name is taken. HDFS (create with overwrite=false) and
        object stores (a PUT with If-None-Match) have the same primitive, but
        ``pyarrow.fs`` exposes neither: its move and its output streams replace.
        """
        if not self.has_exclusive_create:
            raise NoExclusiveCreate(
                f"{type(self.fs).__name__} offers no atomic create-if-absent through pyarrow.fs, which the commit "
                "protocol needs; see 'Commit protocol' in docs/operations/coordinator.md"
            )
        parent = posixpath.dirname(rel)
        tmp = posixpath.join(parent, f".{posixpath.basename(rel)}.{uuid.uuid4().hex}.tmp")
        self.write_bytes(tmp, data)
        try:
            os.link(self.full_path(tmp), self.full_path(rel))
            return True
        except FileExistsError:
            return False
        finally:
            self.fs.delete_file(self.full_path(tmp))

    def delete(self, rel: str) -> bool:
        """Delete a file; ``False`` when it was already gone (deletes are repeated after crashes)."""
        try:
            self.fs.delete_file(self.full_path(rel))
            return True
        except FileNotFoundError:
            return False

    def move(self, rel: str, to: str) -> None:
        self.fs.move(self.full_path(rel), self.full_path(to))

    def delete_dir(self, rel: str) -> None:
        if self.exists(rel):
            self.fs.delete_dir(self.full_path(rel))

    def list_dir(self, rel: str = "") -> list[FileEntry]:
        selector = pafs.FileSelector(self.full_path(rel), allow_not_found=True)
        return [self._entry(i) for i in self.fs.get_file_info(selector)]

    def walk(self, rel: str = "") -> Iterator[FileEntry]:
        selector = pafs.FileSelector(self.full_path(rel), allow_not_found=True, recursive=True)
        for info in self.fs.get_file_info(selector):
            yield self._entry(info)

    def _entry(self, info: pafs.FileInfo) -> FileEntry:
        return FileEntry(self._rel(info.path), info.size or 0, info.type == pafs.FileType.Directory, info.mtime_ns or 0)
