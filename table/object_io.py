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

import posixpath
import urllib.parse
from collections.abc import Iterator

import obstore
import pyarrow as pa
from obstore.exceptions import AlreadyExistsError, NotFoundError, PreconditionError
from obstore.store import from_url

from laketide.table.io import FileEntry, FileIO, InstantFileExists

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
            obstore.head(self.store, self._key(rel))
            return True
        except (NotFoundError, FileNotFoundError):
            return self._is_prefix(rel)

    def is_file(self, rel: str) -> bool:
        try:
            obstore.head(self.store, self._key(rel))
            return True
        except (NotFoundError, FileNotFoundError):
            return False

    def _is_prefix(self, rel: str) -> bool:
        """Object stores have no folders: a "folder" exists while some key lies below it."""
        listed = obstore.list_with_delimiter(self.store, self._key(rel).rstrip("/") + "/" if rel or self.prefix else None)
        return bool(listed["objects"] or listed["common_prefixes"])

    def size(self, rel: str) -> int:
        return self.entry(rel).size

    def entry(self, rel: str) -> FileEntry:
        meta = obstore.head(self.store, self._key(rel))
        return self._entry(meta)

    def read_bytes(self, rel: str) -> bytes:
        try:
            return bytes(obstore.get(self.store, self._key(rel)).bytes())
        except (NotFoundError, FileNotFoundError):
            raise FileNotFoundError(self.full_path(rel)) from None

    def open_input(self, rel: str) -> pa.NativeFile:
        """A seekable file reading ranges of the object, buffered, as pyarrow's readers want it."""
        try:
            reader = obstore.open_reader(self.store, self._key(rel), buffer_size=READ_BUFFER)
        except (NotFoundError, FileNotFoundError):
            raise FileNotFoundError(self.full_path(rel)) from None
        return pa.PythonFile(_Reader(reader), mode="r")

    def open_output(self, rel: str) -> pa.NativeFile:
        """A buffered writer: one PUT for a small file, a multipart upload for a large one; the object
        appears whole when the writer closes, and not at all when it fails."""
        return pa.PythonFile(_Writer(obstore.open_writer(self.store, self._key(rel), buffer_size=WRITE_BUFFER)), mode="w")

    def makedirs(self, rel: str) -> None:
        """Object stores have no folders to make."""

    def write_bytes(self, rel: str, data: bytes) -> None:
        obstore.put(self.store, self._key(rel), data)

    def write_atomic(self, rel: str, data: bytes, overwrite: bool = False) -> None:
        """A PUT is atomic; without ``overwrite`` it is conditional, so an existing object is never replaced."""
        if overwrite:
            obstore.put(self.store, self._key(rel), data)
            return
        try:
            obstore.put(self.store, self._key(rel), data, mode="create")
        except AlreadyExistsError:
            raise InstantFileExists(f"{self.full_path(rel)} already exists and is never overwritten") from None

    def create_exclusive(self, rel: str, data: bytes) -> bool:
        try:
            obstore.put(self.store, self._key(rel), data, mode="create")
            return True
        except AlreadyExistsError:
            return False

    def read_versioned(self, rel: str) -> tuple[bytes, str] | None:
        """The object and its ETag, or ``None`` when there is none."""
        try:
            got = obstore.get(self.store, self._key(rel))
        except (NotFoundError, FileNotFoundError):
            return None
        return bytes(got.bytes()), got.meta["e_tag"]

    def create_versioned(self, rel: str, data: bytes) -> str | None:
        """Create the object unless it exists: its ETag, or ``None`` when another was there."""
        try:
            return obstore.put(self.store, self._key(rel), data, mode="create")["e_tag"]
        except AlreadyExistsError:
            return None

    def replace_versioned(self, rel: str, data: bytes, e_tag: str) -> str | None:
        """Replace the object if it is still the version ``e_tag`` names: the new ETag, or ``None`` when it changed."""
        try:
            return obstore.put(self.store, self._key(rel), data, mode={"e_tag": e_tag})["e_tag"]
        except (PreconditionError, NotFoundError, FileNotFoundError):
            return None

    def delete(self, rel: str) -> bool:
        """Delete an object; ``False`` when it was already gone (a HEAD first: a DELETE succeeds either way)."""
        if not self.is_file(rel):
            return False
        obstore.delete(self.store, self._key(rel))
        return True

    def move(self, rel: str, to: str) -> None:
        """Copy, then delete: not atomic, so only for what is not on the commit path."""
        obstore.rename(self.store, self._key(rel), self._key(to))

    def delete_dir(self, rel: str) -> None:
        keys = [meta["path"] for batch in obstore.list(self.store, self._key(rel).rstrip("/") + "/") for meta in batch]
        for start in range(0, len(keys), 1000):
            obstore.delete(self.store, keys[start : start + 1000])

    def list_dir(self, rel: str = "") -> list[FileEntry]:
        prefix = self._key(rel)
        listed = obstore.list_with_delimiter(self.store, prefix.rstrip("/") + "/" if prefix else None)
        folders = [FileEntry(self._rel(p.rstrip("/")), 0, True) for p in listed["common_prefixes"]]
        return folders + [self._entry(meta) for meta in listed["objects"]]

    def walk(self, rel: str = "") -> Iterator[FileEntry]:
        """Every object below ``rel`` (object stores list keys, so no folder entries)."""
        prefix = self._key(rel)
        for batch in obstore.list(self.store, prefix.rstrip("/") + "/" if prefix else None):
            for meta in batch:
                yield self._entry(meta)

    def _entry(self, meta) -> FileEntry:
        mtime = meta.get("last_modified")
        return FileEntry(self._rel(meta["path"]), meta.get("size", 0), False, int(mtime.timestamp() * 1e9) if mtime else 0)


class _Reader:
    """obstore's reader with the file interface pyarrow's ``PythonFile`` expects (``closed`` an attribute)."""

    def __init__(self, reader):
        self._reader = reader
        self.closed = False

    def read(self, size: int = -1) -> bytes:
        return self._reader.read(None if size is None or size < 0 else size).to_bytes()

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._reader.seek(offset, whence)

    def tell(self) -> int:
        return self._reader.tell()

    def seekable(self) -> bool:
        return True

    def size(self) -> int:
        return self._reader.size

    def close(self) -> None:
        self._reader.close()
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
