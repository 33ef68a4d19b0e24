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

import datetime
import logging
import posixpath
import re
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import obstore
import pyarrow as pa
from obstore.exceptions import (
    AlreadyExistsError,
    BaseError,
    GenericError,
    NotFoundError,
    NotSupportedError,
    PreconditionError,
)
from obstore.store import from_url

from laketide.table.errors import Invalid, first_line
from laketide.table.storage.io import FileEntry, FileIO, InstantFileExists
from laketide.table.storage.object_files import READ_BUFFER, ObjectOutput, ObjectWriter, RangeReader
from laketide.table.storage.store_requests import RequestRetry, StoreRequests

log = logging.getLogger(__name__)

CLIENT_KEYS = {"allow_http", "allow_invalid_certificates", "timeout", "connect_timeout", "proxy_url", "user_agent"}
# laketide's own keys among the options (``storage.max_retries``, ``storage.max_in_flight``), not object_store's:
# (default, least value)
OWN_KEYS = {"max_retries": (10, 0), "max_in_flight": (32, 1)}
EMPTY_RANGE = re.compile(r"416|non-partial|[Rr]ange [Nn]ot [Ss]atisfiable")
# a store without S3's batch delete (DeleteObjects, POST ?delete), which object_store uses even for one object
NO_BATCH_DELETE = re.compile(r"POST \S*\?delete\S* .*(405|501)")


def _split(uri: str) -> tuple[str, str]:
    """(the store's root URI, the prefix below it) of ``uri``; ``s3a://`` (Hadoop's name) is ``s3://``."""
    parsed = urllib.parse.urlparse(uri)
    scheme = "s3" if parsed.scheme == "s3a" else parsed.scheme
    return f"{scheme}://{parsed.netloc}", parsed.path.strip("/")


class ObjectStoreFileIO(FileIO):
    """A table (or any folder) on an object store; paths are keys relative to ``base_path``."""

    @property
    def is_local(self) -> bool:
        return False

    @property
    def has_exclusive_create(self) -> bool:
        return True

    def __init__(self, uri: str, options: Mapping[str, str] | None = None):
        root, prefix = _split(uri)
        self.options = dict(options or {})
        options = dict(self.options)
        own = {key: _count(key, options.pop(key, default), least) for key, (default, least) in OWN_KEYS.items()}
        client = {k: options.pop(k) for k in list(options) if k in CLIENT_KEYS}
        self.root = root
        self.prefix = prefix
        self.base_path = f"{root}/{prefix}" if prefix else root
        policy = RequestRetry(max_retries=own["max_retries"])
        self.requests = StoreRequests(self.base_path, policy, own["max_in_flight"])
        self._suffix_ranges = True  # until the store says it has none (Azure)
        self._batch_delete = True  # until the store says it has none: then one signed DELETE per object
        # retries are laketide's (counted, ``store_requests``) on this store; the parts of a multipart upload
        # go through a second one, on which object_store retries them itself
        # each scheme's settings (obstore types them per store): given as the job's storage.options say
        config: Any = options or None
        client_options: Any = client or None
        try:
            self.store = from_url(
                root,
                config=config,
                client_options=client_options,
                retry_config={"max_retries": 0, "retry_timeout": datetime.timedelta(minutes=5)},
            )
            self._upload_store = from_url(
                root,
                config=config,
                client_options=client_options,
                retry_config={
                    "max_retries": policy.max_retries,
                    "retry_timeout": datetime.timedelta(minutes=5),
                    "backoff": {
                        "init_backoff": datetime.timedelta(seconds=policy.base),
                        "max_backoff": datetime.timedelta(seconds=policy.cap),
                        "base": 2,
                    },
                },
            )
        except (
            BaseException
        ) as error:  # a key the store does not know, a value it cannot parse (some make obstore panic)
            if not isinstance(error, BaseError) and type(error).__name__ != "PanicException":
                raise
            raise Invalid(
                f"the storage options of {uri} are not valid for its store: {first_line(error)}. Fix "
                "storage.options (--storage-option); "
                "the keys are object_store's (aws_region, aws_endpoint_url, azure_storage_account_name, "
                "google_service_account, ...)"
            ) from None

    def _key(self, rel: str) -> str:
        return posixpath.join(self.prefix, rel) if rel else self.prefix

    def full_path(self, rel: str) -> str:
        return f"{self.base_path}/{rel}" if rel else self.base_path

    def _rel_of_key(self, key: str) -> str:
        return posixpath.relpath(key, self.prefix) if self.prefix else key

    def exists(self, rel: str) -> bool:
        try:
            self.requests.call("HEAD", obstore.head, self.store, self._key(rel))
            return True
        except (NotFoundError, FileNotFoundError):
            return self._is_prefix(rel)

    def is_file(self, rel: str) -> bool:
        try:
            self.requests.call("HEAD", obstore.head, self.store, self._key(rel))
            return True
        except (NotFoundError, FileNotFoundError):
            return False

    def _is_prefix(self, rel: str) -> bool:
        """Object stores have no folders: a "folder" exists while some key lies below it."""
        listed = self.requests.call(
            "LIST",
            obstore.list_with_delimiter,
            self.store,
            self._key(rel).rstrip("/") + "/" if rel or self.prefix else None,
        )
        return bool(listed["objects"] or listed["common_prefixes"])

    def size(self, rel: str) -> int:
        return self.entry(rel).size

    def entry(self, rel: str) -> FileEntry:
        meta = self.requests.call("HEAD", obstore.head, self.store, self._key(rel))
        return self._entry_of(meta)

    def read_bytes(self, rel: str) -> bytes:
        try:
            return bytes(self.requests.call("GET", obstore.get, self.store, self._key(rel)).bytes())
        except (NotFoundError, FileNotFoundError):
            raise FileNotFoundError(self.full_path(rel)) from None

    def open_input(self, rel: str) -> pa.NativeFile:
        """A seekable file reading ranges of the object, buffered, as pyarrow's readers want it.

        It opens with one GET of the object's last ``READ_BUFFER`` bytes, which also tells its size: the
        whole of a small file, and the footer that a parquet reader asks for first. Azure has no such
        suffix range; there a HEAD gives the size."""
        key = self._key(rel)
        try:
            if self._suffix_ranges:
                try:
                    tail = self.requests.call(
                        "GET", obstore.get, self.store, key, options={"range": {"suffix": READ_BUFFER}}
                    )
                    return pa.PythonFile(
                        RangeReader(self, key, tail.meta["size"], bytes(tail.bytes()), tail.range[0]), mode="r"
                    )
                except NotSupportedError:
                    self._suffix_ranges = False
                except GenericError as error:
                    if not EMPTY_RANGE.search(first_line(error)):
                        raise  # an empty object has no last bytes: a 416, or a whole (non-partial) answer
            size = self.requests.call("HEAD", obstore.head, self.store, key)["size"]
        except (NotFoundError, FileNotFoundError):
            raise FileNotFoundError(self.full_path(rel)) from None
        return pa.PythonFile(RangeReader(self, key, size), mode="r")

    def open_output(self, rel: str) -> pa.NativeFile:
        """A buffered writer: one PUT for a small file, a multipart upload for a large one; the object
        appears whole when the writer closes, and not at all when it fails or is discarded."""
        return ObjectOutput(ObjectWriter(self, self._key(rel)), mode="w")

    def makedirs(self, rel: str) -> None:
        """Object stores have no folders to make."""

    def write_bytes(self, rel: str, data: bytes) -> None:
        self.requests.call("PUT", obstore.put, self.store, self._key(rel), data)

    def write_parts(self, rel: str, parts: Sequence[bytes | pa.Buffer]) -> int:
        data = b"".join(parts)  # one PUT of the whole object, which a retry sends again
        self.write_bytes(rel, data)
        return len(data)

    def write_atomic(self, rel: str, data: bytes, overwrite: bool = False) -> None:
        """A PUT is atomic; without ``overwrite`` it is conditional, so an existing object is never replaced."""
        if overwrite:
            self.requests.call("PUT", obstore.put, self.store, self._key(rel), data)
            return
        try:
            self.requests.call("PUT", obstore.put, self.store, self._key(rel), data, mode="create")
        except AlreadyExistsError:
            if self.read_bytes(rel) != data:  # the same bytes: an earlier attempt whose response was lost
                raise InstantFileExists(f"{self.full_path(rel)} already exists and is never overwritten") from None

    def create_exclusive(self, rel: str, data: bytes) -> bool:
        """Create ``rel`` unless it exists; ``True`` when it now holds ``data``. A create whose response was
        lost is retried by the client and then finds its own object: the same bytes count as this call's
        (only the one deciding party writes a given outcome, so another's can never be byte-identical)."""
        try:
            self.requests.call("PUT", obstore.put, self.store, self._key(rel), data, mode="create")
            return True
        except AlreadyExistsError:
            return self.read_bytes(rel) == data

    def read_versioned(self, rel: str) -> tuple[bytes, str] | None:
        """The object and its ETag, or ``None`` when there is none."""
        try:
            got = self.requests.call("GET", obstore.get, self.store, self._key(rel))
        except (NotFoundError, FileNotFoundError):
            return None
        e_tag = got.meta["e_tag"]
        if e_tag is None:
            raise Invalid(
                f"the object store of {self.base_path} gave no ETag for {rel}: conditional writes (the storage "
                "lease) need them; use coordinator.lease = 'zookeeper' on this store"
            )
        return bytes(got.bytes()), e_tag

    def create_versioned(self, rel: str, data: bytes) -> str | None:
        """Create the object unless it exists: its ETag, or ``None`` when another was there."""
        try:
            return self.requests.call("PUT", obstore.put, self.store, self._key(rel), data, mode="create")["e_tag"]
        except AlreadyExistsError:
            return self._own_version(rel, data)

    def replace_versioned(self, rel: str, data: bytes, e_tag: str) -> str | None:
        """Replace the object if it is still the version ``e_tag`` names: the new ETag, or ``None`` when it changed."""
        try:
            return self.requests.call("PUT", obstore.put, self.store, self._key(rel), data, mode={"e_tag": e_tag})[
                "e_tag"
            ]
        except (PreconditionError, NotFoundError, FileNotFoundError):
            return self._own_version(rel, data)

    def _own_version(self, rel: str, data: bytes) -> str | None:
        """The ETag of ``rel`` if it holds exactly ``data``: a conditional PUT of ours whose response was
        lost and whose retry then failed its own condition. Callers write bytes no one else writes."""
        found = self.read_versioned(rel)
        return found[1] if found is not None and found[0] == data else None

    def delete(self, rel: str) -> bool:
        """Delete an object; ``False`` when it was already gone (a HEAD first: a DELETE succeeds either way)."""
        if not self.is_file(rel):
            return False
        self._delete_keys([self._key(rel)])
        return True

    def _delete_keys(self, keys: list[str]) -> None:
        """Delete objects in one batch request, or, on a store that has no batch delete, one DELETE each (a URL
        object_store signs: its own delete always takes the batch API on S3)."""
        if self._batch_delete:
            try:
                self.requests.call("DELETE", obstore.delete, self.store, keys)
                return
            except GenericError as error:
                refused = NO_BATCH_DELETE.search(first_line(error))
                if not refused:
                    raise
                self._batch_delete = False
                log.warning(
                    "the store of %s has no batch delete (POST ?delete answered %s); deleting one object at a time",
                    self.base_path,
                    refused.group(1),
                )
        for key in keys:
            self.requests.call("DELETE", self._signed_delete, key)

    def _signed_delete(self, key: str) -> None:
        import httpx

        signer: Any = self.store  # the stores of S3, GCS and Azure sign; no other refuses a batch delete
        url = obstore.sign(signer, "DELETE", key, datetime.timedelta(minutes=10))
        answer = httpx.delete(url, timeout=60)
        if answer.status_code not in (200, 202, 204, 404):
            raise OSError(
                f"DELETE of {key} on the store of {self.base_path} answered HTTP {answer.status_code}: "
                f"{answer.text[:200]}"
            )

    def move(self, rel: str, to: str) -> None:
        """Copy, then delete: not atomic, so only for what is not on the commit path."""
        self.requests.counts.add("DELETE")
        self.requests.call("PUT", obstore.rename, self.store, self._key(rel), self._key(to))  # a copy, then a delete

    def delete_dir(self, rel: str) -> None:
        keys = [meta["path"] for batch in self._pages(self._key(rel).rstrip("/") + "/") for meta in batch]
        for start in range(0, len(keys), 1000):
            self._delete_keys(keys[start : start + 1000])

    def list_dir(self, rel: str = "") -> list[FileEntry]:
        prefix = self._key(rel)
        listed = self.requests.call(
            "LIST", obstore.list_with_delimiter, self.store, prefix.rstrip("/") + "/" if prefix else None
        )
        folders = [FileEntry(self._rel_of_key(p.rstrip("/")), 0, True) for p in listed["common_prefixes"]]
        return folders + [self._entry_of(meta) for meta in listed["objects"]]

    def walk(self, rel: str = "") -> Iterator[FileEntry]:
        """Every object below ``rel`` (object stores list keys, so no folder entries)."""
        prefix = self._key(rel)
        for batch in self._pages(prefix.rstrip("/") + "/" if prefix else None):
            for meta in batch:
                yield self._entry_of(meta)

    def _pages(self, prefix: str | None) -> Iterator[Sequence[Any]]:
        """A recursive listing in pages of up to 1000 keys, as S3 answers one LIST."""
        return self.requests.pages(lambda after: obstore.list(self.store, prefix, offset=after, chunk_size=1000))

    def _entry_of(self, meta: Any) -> FileEntry:
        """A listed object's entry (``meta``: obstore's ``ObjectMeta``)."""
        mtime = meta.get("last_modified")
        return FileEntry(
            self._rel_of_key(meta["path"]), meta.get("size", 0), False, int(mtime.timestamp() * 1e9) if mtime else 0
        )


def _count(key: str, value, least: int) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = least - 1
    if number < least:
        raise Invalid(f"storage.{key} = {value!r} is not a valid count; give a whole number, {least} or more")
    return number
