"""The file objects of an object store (``object_io``): a seekable reader of ranges and a writer that sends one PUT
or streams a multipart upload, both with the file interface pyarrow's ``PythonFile`` expects, and every request
counted and retried by the store's ``StoreRequests``."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import obstore
import pyarrow as pa

if TYPE_CHECKING:
    from laketide.table.storage.object_io import ObjectStoreFileIO

# a read of an object takes at least this much at a time (one GET each)
READ_BUFFER = 4 * 2**20
# an object up to this size is held and sent in one PUT; a larger one streams as a multipart upload of such parts
WRITE_BUFFER = 16 * 2**20


class RangeReader:
    """A seekable file over one object, reading ranges of at least ``READ_BUFFER`` bytes (one GET each,
    counted), with the file interface pyarrow's ``PythonFile`` expects."""

    def __init__(self, io: ObjectStoreFileIO, key: str, size: int, buffer: bytes = b"", buffer_start: int = 0):
        self._io, self._key, self._size = io, key, size
        self._position = 0
        self._buffer, self._buffer_start = buffer, buffer_start
        self.closed = False

    def read(self, size: int = -1) -> bytes:
        end = self._size if size is None or size < 0 else min(self._size, self._position + size)
        if end <= self._position:
            return b""
        buffered_end = self._buffer_start + len(self._buffer)
        if not (self._buffer_start <= self._position and end <= buffered_end):
            length = max(end - self._position, min(READ_BUFFER, self._size - self._position))
            self._buffer = self._io.requests.call(
                "GET", obstore.get_range, self._io.store, self._key, start=self._position, length=length
            ).to_bytes()
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


class ObjectOutput(pa.PythonFile):
    """An object being written, which its writer can also ``discard``: closed then, it never appears."""

    def __init__(self, writer: ObjectWriter, mode: str = "w"):
        self.writer = writer

    def discard(self) -> None:
        self.writer.discard()


class ObjectWriter:
    """A file that pyarrow's ``PythonFile`` writes: up to ``WRITE_BUFFER`` bytes are held and sent in one
    PUT (retried and counted as any request); a larger file streams as a multipart upload, whose parts
    object_store sends ``max_in_flight`` at a time and retries itself."""

    def __init__(self, io: ObjectStoreFileIO, key: str):
        self._io, self._key = io, key
        self._held: list[bytes] = []
        self._upload = None
        self._position = 0
        self.closed = False

    def write(self, data) -> int:
        data = bytes(data)
        self._position += len(data)
        if self._upload is not None:
            self._upload.write(data)
            return len(data)
        self._held.append(data)
        if self._position > WRITE_BUFFER:
            self._upload = obstore.open_writer(
                self._io._upload_store,
                self._key,
                buffer_size=WRITE_BUFFER,
                max_concurrency=self._io.requests.max_in_flight,
            )
            for held in self._held:
                self._upload.write(held)
            self._held = []
        return len(data)

    def tell(self) -> int:
        return self._position

    def flush(self) -> None:
        """Nothing to flush early: the object appears whole at ``close``."""

    def discard(self) -> None:
        """Never complete the object: what is held is dropped, and a multipart upload left unfinished (the
        store drops its parts, by the bucket's lifecycle rule for incomplete uploads)."""
        self.closed = True
        self._held, self._upload = [], None

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._upload is None:
            self._io.requests.call("PUT", obstore.put, self._io.store, self._key, b"".join(self._held))
            self._held = []
            return
        self._upload.close()
        self._io.requests.counts.add("PUT", math.ceil(self._position / WRITE_BUFFER) + 2)
