"""The retry and in-flight rules of requests to an object store, as pure logic (the servers' tests are
``test_object_store.py``)."""

from __future__ import annotations

import threading
import time

import pytest
from obstore.exceptions import GenericError, PermissionDeniedError

from laketide.table.errors import ErrorKind
from laketide.table.storage.store_requests import (
    RETRY,
    RequestCounts,
    RequestRetry,
    StoreRequests,
    StoreUnavailable,
    is_transient,
)

SLOW_DOWN = (
    "Generic S3 error: Error performing PUT http://s3/lake/a in 1ms - Server returned non-2xx status code: 503 "
    "Service Unavailable: SlowDown\n\nDebug source: ..."
)
RESET = (
    "Generic S3 error: Error performing GET http://s3/lake/a in 1ms - HTTP error: error sending request\n\nDebug "
    "source: ..."
)
NOT_ALLOWED = (
    "Generic S3 error: Error performing PUT http://s3/lake/a in 1ms - Server returned non-2xx status code: 400 Bad "
    "Request: x"
)


def test_throttling_and_lost_connections_are_transient_and_client_errors_are_not():
    assert is_transient(GenericError(SLOW_DOWN)) and is_transient(GenericError(RESET))
    assert is_transient(GenericError(SLOW_DOWN.replace("503 Service Unavailable", "429 Too Many Requests")))
    assert not is_transient(GenericError(NOT_ALLOWED))
    assert not is_transient(PermissionDeniedError("403")) and not is_transient(ValueError(SLOW_DOWN))


def test_the_backoff_grows_to_its_cap_with_full_jitter():
    policy = RequestRetry(max_retries=10, base=0.05, cap=5.0)
    assert [policy.delay(n, lambda: 1.0) for n in (1, 2, 3)] == [0.1, 0.2, 0.4]
    assert policy.delay(20, lambda: 1.0) == 5.0 and policy.delay(20, lambda: 0.0) == 0.0


def _flaky(failures: int, error: str = SLOW_DOWN):
    calls = []

    def request():
        calls.append(1)
        if len(calls) <= failures:
            raise GenericError(error)
        return "done"

    return request, calls


def test_a_throttled_request_is_sent_again_and_each_retry_is_counted():
    counts = RequestCounts()
    requests = StoreRequests("s3://lake/t", RequestRetry(max_retries=3, base=0.001), 4, counts)
    request, calls = _flaky(2)
    assert requests.call("PUT", request) == "done" and len(calls) == 3
    assert counts.snapshot() == {"PUT": 3, RETRY: 2}


def test_past_max_retries_the_store_is_named_as_unavailable():
    requests = StoreRequests("s3://lake/t", RequestRetry(max_retries=2, base=0.001), 4, RequestCounts())
    request, calls = _flaky(10)
    with pytest.raises(StoreUnavailable) as failed:
        requests.call("PUT", request)
    assert len(calls) == 3 and failed.value.kind is ErrorKind.UNAVAILABLE
    assert (
        "s3://lake/t" in str(failed.value) and "storage.max_retries" in str(failed.value) and "503" in str(failed.value)
    )


def test_a_client_error_is_raised_at_once():
    requests = StoreRequests("s3://lake/t", RequestRetry(max_retries=5, base=0.001), 4, RequestCounts())
    request, calls = _flaky(10, NOT_ALLOWED)
    with pytest.raises(GenericError):
        requests.call("PUT", request)
    assert len(calls) == 1


def test_a_listing_that_fails_mid_way_goes_on_after_the_last_key_it_gave():
    pages = [[{"path": "a"}, {"path": "b"}], [{"path": "c"}], [{"path": "d"}]]
    asked: list[str | None] = []

    def listing(after):
        asked.append(after)
        start = {None: 0, "b": 1, "c": 2}[after]
        for n, page in enumerate(pages[start:]):
            if after is None and n == 1:
                raise GenericError(RESET)
            yield page

    requests = StoreRequests("s3://lake/t", RequestRetry(max_retries=2, base=0.001), 4, RequestCounts())
    assert [m["path"] for page in requests.pages(listing) for m in page] == ["a", "b", "c", "d"]
    assert asked == [None, "b"]


def test_no_more_than_max_in_flight_requests_are_open_at_once():
    requests = StoreRequests("s3://lake/t", RequestRetry(), 2, RequestCounts())
    open_now, most, lock = [0], [0], threading.Lock()

    def request():
        with lock:
            open_now[0] += 1
            most[0] = max(most[0], open_now[0])
        time.sleep(0.02)
        with lock:
            open_now[0] -= 1

    threads = [threading.Thread(target=requests.call, args=("GET", request)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == 2
