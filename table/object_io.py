"""``FileIO`` on object stores (S3, Azure Blob, GCS) through object_store's Python bindings, ``obstore``.

One library for the three clouds, with what the commit protocol needs and ``pyarrow.fs`` does not
offer: a create-if-absent PUT (``If-None-Match: *`` on S3, a generation precondition on GCS,
``If-None-Match`` on Azure), and a PUT conditioned on an ETag. A PUT is atomic on all three, so a
timeline file needs no rename: readers see the whole object or none.

Options are object_store's own keys, which hudi-rs and delta-rs take too (``aws_endpoint_url``,
``aws_region``, ``aws_access_key_id``, ``azure_storage_account_name``, ``google_service_account``, ...);
what is not given comes from the environment, as object_store reads it. ``allow_http`` lets an
``http://`` endpoint (a test server) be used.
"""

from __future__ import annotations

import math
import posixpath
import threading
import urllib.parse
from collections.abc import Iterator

import obstore
import pyarrow as pa
from obstore.exceptions import AlreadyExistsError, NotFoundError, PreconditionError
from obstore.store import from_url

from laketide.table.io import FileEntry, FileIO, InstantFileExists

class RequestCounts:
    """The requests this process made to object stores, by kind (GET, PUT, LIST, DELETE, HEAD).

    One per process, as Prometheus counters are: Spark's tasks in this process and the driver's
    threads add to it at once, so it is guarded by ``_lock``. A micro-batch reports the difference
    across it (``BatchWriter``): the requests of the driver's process, not those of executors elsewhere.
    A multipart upload counts its parts and the two requests that open and complete it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}

    def add(self, kind: str, n: int = 1) -> None:
        with self._lock:
            self._counts[kind] = self._counts.get(kind, 0) + n

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    @staticmethod
    def since(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
        return {kind: after[kind] - before.get(kind, 0) for kind in sorted(after) if after[kind] > before.get(kind, 0)}


REQUESTS = RequestCounts()
CLIENT_KEYS = {"allow_http", "allow_invalid_certificates", "timeout", "connect_timeout", "proxy_url", "user_agent"}
READ_BUFFER = 4 * 2**20
WRITE_BUFFER = 16 * 2**20


def _split(uri: str) -> tuple[str, str]:
    """(the store's root URI, the prefix below it) of ``uri``; ``s3a://`` (Hadoop's name) is ``s3://``."""
    parsed = urllib.parse.urlparse(uri)
    scheme = "s3" if parsed.scheme == "s3a" else parsed.scheme
    return f"{scheme}://{parsed.netloc}", parsed.path.strip("/")


class ObjectStoreFileIO(FileIO):
    """A table (or any folder) on an object store; paths are keys relative to ``base_path``."""

    is_local = False
    has_exclusive_create = True

    def __init__(self, uri: str, options: dict[str, str] | None = None):
        root, prefix = _split(uri)
        options = dict(options or {})
        client = {k: options.pop(k) for k in list(options) if k in CLIENT_KEYS}
        self.root = root
        self.prefix = prefix
        self.options = {**options, **client}
        self.store = from_url(root, config=options or None, client_options=client or None)
        self.base_path = f"{root}/{prefix}" if prefix else root

    def _key(self, rel: str) -> str:
        return posixpath.join(self.prefix, rel) if rel else self.prefix

    def full_path(self, rel: str) -> str:
        return f"{self.base_path}/{rel}" if rel else self.base_path

    def _rel(self, key: str) -> str:
        return posixpath.relpath(key, self.prefix) if self.prefix else key

    def exists(self, rel: str) -> bool:
        try:
            _call("HEAD", obstore.head, self.store, self._key(rel))
            return True
        except (NotFoundError, FileNotFoundError):
            return self._is_prefix(rel)

    def is_file(self, rel: str) -> bool:
        try:
            _call("HEAD", obstore.head, self.store, self._key(rel))
            return True
        except (NotFoundError, FileNotFoundError):
            return False

    def _is_prefix(self, rel: str) -> bool:
        """Object stores have no folders: a "folder" exists while some key lies below it."""
        listed = _call("LIST", obstore.list_with_delimiter, self.store, self._key(rel).rstrip("/") + "/" if rel or self.prefix else None)
        return bool(listed["objects"] or listed["common_prefixes"])

    def size(self, rel: str) -> int:
        return self.entry(rel).size

    def entry(self, rel: str) -> FileEntry:
        meta = _call("HEAD", obstore.head, self.store, self._key(rel))
        return self._entry(meta)

    def read_bytes(self, rel: str) -> bytes:
        try:
            return bytes(_call("GET", obstore.get, self.store, self._key(rel)).bytes())
        except (NotFoundError, FileNotFoundError):
            raise FileNotFoundError(self.full_path(rel)) from None

    def open_input(self, rel: str) -> pa.NativeFile:
        """A seekable file reading ranges of the object, buffered, as pyarrow's readers want it."""
        key = self._key(rel)
        try:
            size = _call("HEAD", obstore.head, self.store, key)["size"]
        except (NotFoundError, FileNotFoundError):
            raise FileNotFoundError(self.full_path(rel)) from None
        return pa.PythonFile(_RangeReader(self.store, key, size), mode="r")

    def open_output(self, rel: str) -> pa.NativeFile:
        """A buffered writer: one PUT for a small file, a multipart upload for a large one; the object
        appears whole when the writer closes, and not at all when it fails."""
        return pa.PythonFile(_Writer(obstore.open_writer(self.store, self._key(rel), buffer_size=WRITE_BUFFER)), mode="w")

    def makedirs(self, rel: str) -> None:
        """Object stores have no folders to make."""

    def write_bytes(self, rel: str, data: bytes) -> None:
        _call("PUT", obstore.put, self.store, self._key(rel), data)

    def write_atomic(self, rel: str, data: bytes, overwrite: bool = False) -> None:
        """A PUT is atomic; without ``overwrite`` it is conditional, so an existing object is never replaced."""
        if overwrite:
            _call("PUT", obstore.put, self.store, self._key(rel), data)
            return
        try:
            _call("PUT", obstore.put, self.store, self._key(rel), data, mode="create")
        except AlreadyExistsError:
            if self.read_bytes(rel) != data:  # the same bytes: an earlier attempt whose response was lost
                raise InstantFileExists(f"{self.full_path(rel)} already exists and is never overwritten") from None

    def create_exclusive(self, rel: str, data: bytes) -> bool:
        """Create ``rel`` unless it exists; ``True`` when it now holds ``data``. A create whose response was
        lost is retried by the client and then finds its own object: the same bytes count as this call's
        (only the one deciding party writes a given outcome, so another's can never be byte-identical)."""
        try:
            _call("PUT", obstore.put, self.store, self._key(rel), data, mode="create")
            return True
        except AlreadyExistsError:
            return self.read_bytes(rel) == data

    def read_versioned(self, rel: str) -> tuple[bytes, str] | None:
        """The object and its ETag, or ``None`` when there is none."""
        try:
            got = _call("GET", obstore.get, self.store, self._key(rel))
        except (NotFoundError, FileNotFoundError):
            return None
        return bytes(got.bytes()), got.meta["e_tag"]

    def create_versioned(self, rel: str, data: bytes) -> str | None:
        """Create the object unless it exists: its ETag, or ``None`` when another was there."""
        try:
            return _call("PUT", obstore.put, self.store, self._key(rel), data, mode="create")["e_tag"]
        except AlreadyExistsError:
            return None

    def replace_versioned(self, rel: str, data: bytes, e_tag: str) -> str | None:
        """Replace the object if it is still the version ``e_tag`` names: the new ETag, or ``None`` when it changed."""
        try:
            return _call("PUT", obstore.put, self.store, self._key(rel), data, mode={"e_tag": e_tag})["e_tag"]
        except (PreconditionError, NotFoundError, FileNotFoundError):
            return None

    def delete(self, rel: str) -> bool:
        """Delete an object; ``False`` when it was already gone (a HEAD first: a DELETE succeeds either way)."""
        if not self.is_file(rel):
            return False
        _call("DELETE", obstore.delete, self.store, self._key(rel))
        return True

    def move(self, rel: str, to: str) -> None:
        """Copy, then delete: not atomic, so only for what is not on the commit path."""
        REQUESTS.add("DELETE")
        _call("PUT", obstore.rename, self.store, self._key(rel), self._key(to))  # a copy, then a delete

    def delete_dir(self, rel: str) -> None:
        keys = [meta["path"] for batch in _pages(self.store, self._key(rel).rstrip("/") + "/") for meta in batch]
        for start in range(0, len(keys), 1000):
            _call("DELETE", obstore.delete, self.store, keys[start : start + 1000])

    def list_dir(self, rel: str = "") -> list[FileEntry]:
        prefix = self._key(rel)
        listed = _call("LIST", obstore.list_with_delimiter, self.store, prefix.rstrip("/") + "/" if prefix else None)
        folders = [FileEntry(self._rel(p.rstrip("/")), 0, True) for p in listed["common_prefixes"]]
        return folders + [self._entry(meta) for meta in listed["objects"]]

    def walk(self, rel: str = "") -> Iterator[FileEntry]:
        """Every object below ``rel`` (object stores list keys, so no folder entries)."""
        prefix = self._key(rel)
        for batch in _pages(self.store, prefix.rstrip("/") + "/" if prefix else None):
            for meta in batch:
                yield self._entry(meta)

    def _entry(self, meta) -> FileEntry:
        mtime = meta.get("last_modified")
        return FileEntry(self._rel(meta["path"]), meta.get("size", 0), False, int(mtime.timestamp() * 1e9) if mtime else 0)


class _RangeReader:
    """A seekable file over one object, reading ranges of at least ``READ_BUFFER`` bytes (one GET each,
    counted), with the file interface pyarrow's ``PythonFile`` expects."""

    def __init__(self, store, key: str, size: int):
        self._store, self._key, self._size = store, key, size
        self._position = 0
        self._buffer, self._buffer_start = b"", 0
        self.closed = False

    def read(self, size: int = -1) -> bytes:
        end = self._size if size is None or size < 0 else min(self._size, self._position + size)
        if end <= self._position:
            return b""
        buffered_end = self._buffer_start + len(self._buffer)
        if not (self._buffer_start <= self._position and end <= buffered_end):
            length = max(end - self._position, min(READ_BUFFER, self._size - self._position))
            self._buffer = _call("GET", obstore.get_range, self._store, self._key, start=self._position, length=length).to_bytes()
            self._buffer_start = self._position
        data = self._buffer[self._position - self._buffer_start : end - self._buffer_start]
        self._position = end
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._position, 2: self._size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def tell(self) -> int:
        return self._position

    def seekable(self) -> bool:
        return True

    def size(self) -> int:
        return self._size

    def close(self) -> None:
        self._buffer = b""
        self.closed = True


class _Writer:
    """obstore's buffered writer with the file interface pyarrow's ``PythonFile`` expects."""

    def __init__(self, writer):
        self._writer = writer
        self._position = 0
        self.closed = False

    def write(self, data) -> int:
        written = self._writer.write(data)
        self._position += written
        return written

    def tell(self) -> int:
        return self._position

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        if not self.closed:
            self._writer.close()
            self.closed = True
            parts = math.ceil(self._position / WRITE_BUFFER)
            REQUESTS.add("PUT", 1 if parts <= 1 else parts + 2)


def _call(kind: str, request, *args, **kwargs):
    """One request to the store, counted by kind."""
    REQUESTS.add(kind)
    return request(*args, **kwargs)


def _pages(store, prefix: str | None):
    """A recursive listing, one LIST request per page."""
    for page in obstore.list(store, prefix):
        REQUESTS.add("LIST")
        yield page
