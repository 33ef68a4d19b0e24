"""``api/read_cache.py`` on its own: pure ASGI logic, in front of a small app that counts what it is asked. (The
API's own tests run it in front of the real app, on a real server.)"""

from __future__ import annotations

import asyncio

import httpx

from laketide.api.read_cache import ReadCache


class Counting:
    """An ASGI app that answers ``GET /n`` with how often it was asked, slowly, and ``/fail`` with 500."""

    def __init__(self):
        self.asked = 0

    async def __call__(self, scope, receive, send):
        self.asked += 1
        await asyncio.sleep(0.05)
        status = 500 if scope["path"] == "/fail" else 200
        await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": str(self.asked).encode()})


def _ask(app, requests: list[tuple[str, str, dict]]) -> list[httpx.Response]:
    async def run():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            return await asyncio.gather(*(client.request(m, p, headers=h) for m, p, h in requests))

    return asyncio.run(run())


def test_requests_for_the_same_read_share_one_answer_until_it_is_stale_or_something_changed():
    inner = Counting()
    app = ReadCache(inner, ttl=0.3)
    together = _ask(app, [("GET", "/n", {})] * 10)
    assert inner.asked == 1 and {a.text for a in together} == {"1"}  # asked while it was computed: one answer
    assert _ask(app, [("GET", "/n", {})])[0].text == "1" and inner.asked == 1  # kept
    assert _ask(app, [("GET", "/n?other=1", {})])[0].text == "2"  # another query is another read
    assert _ask(app, [("GET", "/n", {"authorization": "Bearer x"})])[0].text == "3"  # other credentials too
    _ask(app, [("POST", "/n", {})])  # a change: every kept answer dropped
    assert _ask(app, [("GET", "/n", {})])[0].text == "5"
    asyncio.run(asyncio.sleep(0.35))
    assert _ask(app, [("GET", "/n", {})])[0].text == "6"  # stale


def test_an_error_is_never_shared():
    inner = Counting()
    app = ReadCache(inner, ttl=5)
    answers = _ask(app, [("GET", "/fail", {})] * 3)
    assert [a.status_code for a in answers] == [500] * 3 and inner.asked == 3
