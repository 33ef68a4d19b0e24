"""Requests to an object store: counted by kind, bounded in flight, and retried when the store says "later".

As Flink's async sink (FLIP-171) treats its requests: at most ``max_in_flight`` requests of one store are
open at once in this process, and a request the store throttles (503 SlowDown, 429, 500) or loses (a
reset connection, a timeout) is sent again after an exponential backoff with full jitter, up to
``max_retries`` times. Past that the caller gets ``StoreUnavailable``, naming the store and the way out;
a micro-batch then fails and rolls back as any failed micro-batch does.

A conditional PUT whose response was lost may have landed: the retry then finds the object there (or
its ETag moved). ``ObjectStoreFileIO`` settles that by comparing bytes, never by trusting the retry.

The retries of the parts of a multipart upload are object_store's own, with the same bound; they are not
in the counts, because object_store does not report them.
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from obstore.exceptions import GenericError, PermissionDeniedError, UnauthenticatedError

from laketide.table.errors import ErrorKind, LaketideError, Unavailable, first_line

T = TypeVar("T")
RETRY = "RETRY"  # the kind under which retries are counted, beside GET, PUT, LIST, DELETE and HEAD

# what object_store reports for a throttled or lost request, with its own retries turned off
TRANSIENT = re.compile(r"status code: (408|429|5\d\d)\b|HTTP error|timed out|[Cc]onnection (reset|closed|refused)")


class RequestCounts:
    """The requests this process made to object stores, by kind, and their retries (``RETRY``).

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


@dataclass(frozen=True)
class RequestRetry:
    """``max_retries`` retries after the first attempt, waiting a random time up to ``base * 2**n``
    (capped at ``cap``) before the n-th: "full jitter", so throttled writers do not retry in step."""

    max_retries: int = 10
    base: float = 0.05
    cap: float = 5.0

    def delay(self, retry: int, draw: Callable[[], float] = random.random) -> float:
        return draw() * min(self.cap, self.base * 2**retry)


def is_transient(error: BaseException) -> bool:
    """A failure worth sending the request again for: throttling, a server error, a lost connection."""
    return isinstance(error, GenericError) and bool(TRANSIENT.search(first_line(error)))


class StoreUnavailable(Unavailable):
    """The store kept failing a request past ``storage.max_retries``."""


class StoreRefused(LaketideError):
    """The store refused the credentials, or the bucket (container) is not there: retrying cannot help."""


def store_failure(error: BaseException, what: str) -> LaketideError:
    """A store's error that no caller told apart (object_store's own), as laketide's, naming ``what`` (the table)."""
    return LaketideError(
        f"the object store of {what} failed: {type(error).__name__}: {first_line(error)}. Check the store's endpoint, "
        "credentials and the path; the table is as the last completed instant left it"
    )


# a listing or request of a bucket (container) that does not exist, as S3, GCS and Azure answer it
NO_BUCKET = re.compile(
    r"NoSuchBucket|ContainerNotFound|bucket does not exist|The specified bucket does not exist", re.IGNORECASE
)


class StoreRequests:
    """The requests of one ``ObjectStoreFileIO``: its threads (the driver's file-group writers, a
    heartbeat) share ``_slots``, a semaphore of ``max_in_flight``; ``counts`` is the process's."""

    def __init__(self, where: str, policy: RequestRetry, max_in_flight: int, counts: RequestCounts = REQUESTS):
        self.where = where
        self.policy = policy
        self.max_in_flight = max_in_flight
        self.counts = counts
        self._slots = threading.BoundedSemaphore(max_in_flight)

    def call(self, kind: str, request: Callable[..., T], *args, **kwargs) -> T:
        """``request(*args, **kwargs)``, counted as ``kind``, retried while the store fails it transiently."""
        retry = 0
        while True:
            self.counts.add(kind)
            try:
                with self._slots:
                    return request(*args, **kwargs)
            except GenericError as error:
                retry = self._wait_to_retry(kind, error, retry)
            except (PermissionDeniedError, UnauthenticatedError) as error:
                raise self._refused(kind, error) from error

    def pages(self, listing: Callable[[str | None], Iterable[Sequence[Any]]]) -> Iterator[Sequence[Any]]:
        """A recursive listing, one LIST per page; a page that fails transiently is asked for again,
        from after the last key already yielded."""
        after: str | None = None
        retry = 0
        while True:
            try:
                pages, first = iter(listing(after)), True
                while True:
                    with self._slots:  # held for one page, never while the caller works on it
                        page = next(pages, None)
                    if page is None:
                        self.counts.add("LIST", 1 if first else 0)  # an empty listing is one request too
                        return
                    self.counts.add("LIST")
                    first = False
                    if page:
                        after = page[-1]["path"]
                    yield page
            except GenericError as error:
                retry = self._wait_to_retry("LIST", error, retry)
            except (PermissionDeniedError, UnauthenticatedError) as error:
                raise self._refused("LIST", error) from error

    def _wait_to_retry(self, kind: str, error: GenericError, retry: int) -> int:
        """After a failed ``kind`` request: raise what is not transient, or the store past ``max_retries``;
        else count the retry, wait its backoff, and give the next retry's number."""
        if not is_transient(error):
            if NO_BUCKET.search(str(error)):
                raise StoreRefused(
                    f"the bucket (container) of {self.where} does not exist: check the path's bucket name and the "
                    "store's endpoint and region (storage.options, --storage-option), or create the bucket",
                    kind=ErrorKind.NOT_FOUND,
                ) from error
            raise error  # what a caller tells apart itself (an empty range, a store without batch delete), or a bug
        if retry >= self.policy.max_retries:
            raise self._gave_up(kind, error) from error
        retry += 1
        self.counts.add(RETRY)
        time.sleep(self.policy.delay(retry))
        return retry

    def _refused(self, kind: str, error: BaseException) -> StoreRefused:
        denied = isinstance(error, PermissionDeniedError)
        return StoreRefused(
            f"the object store at {self.where} refused a {kind}: "
            f"{'the credentials may not do that' if denied else 'it does not accept the credentials'} "
            f"({first_line(error)}). Check the credentials in storage.options (--storage-option) or the environment",
            kind=ErrorKind.FORBIDDEN if denied else ErrorKind.UNAUTHENTICATED,
        )

    def _gave_up(self, kind: str, error: BaseException) -> StoreUnavailable:
        return StoreUnavailable(
            f"the object store at {self.where} failed a {kind} {self.policy.max_retries + 1} times "
            f"({first_line(error)}). "
            "Check that the store is reachable and its credentials are valid, or raise storage.max_retries "
            "if it is throttling this job."
        )
