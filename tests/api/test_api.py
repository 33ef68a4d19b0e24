"""The REST API over real HTTP (uvicorn on a free port), standalone against a table whose job is down."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pyarrow as pa
import pytest
from readback import hudi_read, rows
from writes import history

from laketide.api.app import create_app
from laketide.api.server import ApiServer
from laketide.coordinator import LocalLease
from laketide.writer import quarantine

TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def written(tmp_path, request):
    """A table of version 6, or of the version a test asks for (``BOTH_VERSIONS``)."""
    return history(tmp_path / "t", width=4, version=getattr(request, "param", 6))


# what reads or changes the timeline runs on version 6 and on 8 (Hudi 1.0's timeline and its completion times)
BOTH_VERSIONS = pytest.mark.parametrize("written", [6, 8], ids=["v6", "v8"], indirect=True)


@pytest.fixture
def server(written):
    table = written[0]
    app = create_app(table, TOKEN, lease_factory=lambda: LocalLease.for_table(table.uri, job_id="serve"))
    srv = ApiServer(app).start()
    yield srv
    srv.stop()


@BOTH_VERSIONS
def test_listing_and_pagination(server, written):
    _, instants, _, dangling = written
    base = server.address
    page = httpx.get(f"{base}/v1/instants", params={"limit": 2}).json()
    assert [i["instant"] for i in page["items"]] == [dangling, instants[2]]
    assert page["items"][0]["state"] == "INFLIGHT"
    rest = httpx.get(f"{base}/v1/instants", params={"limit": 2, "before": page["next_before"]}).json()
    assert [i["instant"] for i in rest["items"]] == [instants[1], instants[0]]
    assert rest["next_before"] is None
    completed = httpx.get(f"{base}/v1/instants", params={"state": "COMPLETED", "action": "commit"}).json()
    assert [i["instant"] for i in completed["items"]] == instants[::-1]


@BOTH_VERSIONS
def test_one_instant_and_errors(server, written):
    _, instants, _, _ = written
    base = server.address
    detail = httpx.get(f"{base}/v1/instants/{instants[1]}").json()
    assert detail["state"] == "COMPLETED" and detail["operation"] == "UPSERT"
    assert detail["totals"]["writes"] >= 4 and detail["files"]
    assert detail["extra_metadata"]["laketide.batch.id"] == "1"
    assert httpx.get(f"{base}/v1/instants/20000101000000000").status_code == 404
    assert httpx.get(f"{base}/v1/instants/not-an-instant").status_code == 400
    assert httpx.get(f"{base}/v1/instants", params={"limit": 0}).status_code == 400
    assert httpx.get(f"{base}/v1/instants", params={"state": "DONE"}).status_code == 400
    assert httpx.get(f"{base}/v1/instants", params={"action": "bogus"}).status_code == 400


@BOTH_VERSIONS
def test_file_groups_writer_lease_metrics_health(server, written):
    table = written[0]
    base = server.address
    groups = httpx.get(f"{base}/v1/file-groups").json()
    assert {g["partition"] for g in groups} == {"us", "eu"}
    assert sum(g["records"] for g in groups) == table.snapshot().num_rows
    assert all(g["size_bytes"] > 0 for g in groups)
    assert {g["partition"] for g in httpx.get(f"{base}/v1/file-groups", params={"partition": "eu"}).json()} == {"eu"}
    assert httpx.get(f"{base}/v1/writer").json() == {
        "running": False,
        "writer_id": None,
        "source": None,
        "trigger": None,
        "stopping": False,
        "files_waiting": None,
        "current_batch": None,
        "last_instant": None,
        "recent": [],
        "quarantined_total": 0,
        "records_total": 0,
        "index": None,
        "health": None,
        "failures": [],
        "last_job": None,
        "catalog": None,
    }
    assert httpx.get(f"{base}/v1/lease").json() == {"held": False, "holder": None}
    metrics = httpx.get(f"{base}/metrics").text
    assert (
        "laketide_commits_total" in metrics
        and "laketide_commit_latency_seconds_bucket" in metrics
        and 'laketide_lease_held{table="t"} 0.0' in metrics
    )
    assert httpx.get(f"{base}/healthz").json() == {"status": "ok", "table": table.uri}
    assert httpx.get(f"{base}/docs").status_code == 200
    # a server of one table lists it, and takes its name or its path where a route names a table, or nothing
    assert [(t["name"], t["uri"]) for t in httpx.get(f"{base}/v1/tables").json()] == [("t", table.uri)]
    assert httpx.get(f"{base}/v1/partitions", params={"table": "t"}).status_code == 200
    assert httpx.get(f"{base}/v1/partitions", params={"table": table.uri + "/"}).status_code == 200
    other = httpx.get(f"{base}/v1/partitions", params={"table": "orders"})
    assert other.status_code == 404 and "answers for table t" in other.json()["detail"]


def test_mutations_need_the_token(server, written):
    _, instants, _, _ = written
    url = f"{server.address}/v1/instants/{instants[2]}/rollback"
    assert httpx.post(url, json={}).status_code == 401
    assert httpx.post(url, json={}, headers={"Authorization": "Bearer wrong"}).status_code == 403
    assert httpx.post(url, json={"dry_run": "maybe"}, headers=AUTH).status_code == 400


@BOTH_VERSIONS
def test_standalone_rollback_refused_while_a_job_holds_the_lease(server, written):
    table, instants, _, _ = written
    job_lease = LocalLease.for_table(table.uri, job_id="streaming-job", api_address="http://127.0.0.1:9/")
    job_lease.acquire()
    try:
        answer = httpx.post(f"{server.address}/v1/instants/{instants[2]}/rollback", json={}, headers=AUTH)
        assert answer.status_code == 409
        assert answer.json()["holder_api"] == "http://127.0.0.1:9/"
        assert "streaming-job" in answer.json()["detail"]
        held = httpx.get(f"{server.address}/v1/lease").json()
        assert held["held"] and held["holder"]["job_id"] == "streaming-job"
    finally:
        job_lease.release()


@BOTH_VERSIONS
def test_standalone_rollback_restores_the_previous_state(server, written):
    table, instants, states, dangling = written
    url = f"{server.address}/v1/instants"
    # the dangling instant is the newest: first a dry run, then the rollback
    dry = httpx.post(f"{url}/{dangling}/rollback", json={"dry_run": True}, headers=AUTH).json()
    data_files = [f for f in dry["files"] if f.endswith(".parquet")]
    assert dry["dry_run"] and len(data_files) == 1 and all(table.io.exists(f) for f in dry["files"])
    assert httpx.post(f"{url}/{dangling}/rollback", json={}, headers=AUTH).status_code == 200
    refused = httpx.post(f"{url}/{instants[1]}/rollback", json={}, headers=AUTH)
    assert refused.status_code == 409 and "force" in refused.json()["detail"]
    done = httpx.post(f"{url}/{instants[2]}/rollback", json={}, headers=AUTH).json()
    assert done["was_completed"] and done["rollback_instant"]
    assert rows(hudi_read(table.uri), "id", ["id", "v", "region"]) == states[1]
    rb = httpx.get(f"{url}/{done['rollback_instant']}").json()
    assert rb["action"] == "rollback" and rb["rolled_back"] == instants[2]
    assert httpx.post(f"{url}/20000101000000000/rollback", json={}, headers=AUTH).status_code == 404


@BOTH_VERSIONS
def test_a_corrupt_commit_answers_500_naming_the_file_and_the_cli_exits_1(written):
    """A damaged table is the server's side: 500 with what is wrong and the way out, never a 400. (A server
    caches completed commits it has read, which never change: this one starts on the damaged table.)"""
    from commands import laketide

    table, instants, _, _ = written
    (completed,) = Path(table.uri, table.config.timeline_dir).glob(f"{instants[-1]}*.commit")  # _<completion> on 8
    completed.write_bytes(b"{not json")
    server = ApiServer(create_app(table, TOKEN)).start()
    try:
        answer = httpx.get(f"{server.address}/v1/instants/{instants[-1]}")
        assert answer.status_code == 500, answer.text
        body = answer.json()
        assert body["kind"] == "failed" and instants[-1] in body["detail"] and "Way out" in body["detail"]
        code, out, _ = laketide("show", table.uri, instants[-1], "--json")
        assert code == 1 and json.loads(out)["kind"] == "failed"
        assert httpx.get(f"{server.address}/v1/instants/20000101000000000").json()["kind"] == "not_found"
    finally:
        server.stop()


@BOTH_VERSIONS
def test_the_dashboards_views_over_http(server, written, tmp_path):
    table, instants, _, dangling = written
    base = server.address
    page = httpx.get(f"{base}/v1/timeline", params={"limit": 2}).json()
    assert [r["instant"] for r in page["items"]] == [dangling, instants[2]] and page["next_before"] == instants[2]
    newest = page["items"][1]
    assert (
        newest["inserts"] + newest["updates"] == 4
        and newest["records"] >= 4
        and newest["files"] >= 1
        and newest["bytes"] > 0
        and newest["seconds"] >= 0
        and not newest["archived"]
    )
    assert page["items"][0]["records"] is None, "an inflight write has no totals yet"
    services = httpx.get(f"{base}/v1/services").json()
    assert [p["instant"] for p in services["pending"]] == [dangling] and services["archive"]["files"] == 0
    layout = httpx.get(f"{base}/v1/layout", params={"limit": 1}).json()
    assert (
        layout["partition_count"] == 2
        and len(layout["partitions"]) == 1
        and layout["small_files"] == layout["file_groups"]
    )
    assert 0 < layout["live_bytes"] <= layout["total_bytes"]
    groups = httpx.get(f"{base}/v1/layout/file-groups", params={"limit": 1, "order": "size"}).json()
    assert groups["total"] == layout["file_groups"] and len(groups["items"]) == 1
    assert groups["items"][0]["size_bytes"] == min(g["size_bytes"] for g in httpx.get(f"{base}/v1/file-groups").json())

    assert httpx.get(f"{base}/v1/quarantine").json()["total"] == 0
    target = table.uri.rstrip("/") + "_quarantine"
    quarantine.write_part(
        f"{target}/writer=w/batch_id=0",
        quarantine.quarantine_rows(instants[0], pa.array(["no key", "no key"]), pa.array(['{"a":1}', "x"])),
    )
    quarantine.write_part(
        f"{target}/writer=w/batch_id=1",
        quarantine.quarantine_rows(instants[1], pa.array(["bad ts"]), pa.array(['{"ts":"?"}'])),
    )
    summary = httpx.get(f"{base}/v1/quarantine", params={"sample": 2}).json()
    assert summary["total"] == 3 and summary["files"] == 2 and summary["reasons"] == {"no key": 2, "bad ts": 1}
    assert len(summary["sample"]) == 2
    html = httpx.get(f"{base}/ui/part/quarantine").text
    assert "no key" in html and "{&#34;ts&#34;:&#34;?&#34;}" in html, "raw rows are shown, escaped"


@BOTH_VERSIONS
def test_the_dashboards_actions_need_the_token_and_act_through_operations(server, written):
    table, instants, states, dangling = written
    base = server.address
    refused = httpx.post(f"{base}/ui/act/rollback", data={"instant": instants[2], "dry_run": "true"})
    assert (
        refused.status_code == 401
        and "API token" in refused.text
        and refused.headers["content-type"].startswith("text/html")
    )
    dry = httpx.post(f"{base}/ui/act/rollback", data={"instant": dangling, "dry_run": "true"}, headers=AUTH)
    assert dry.status_code == 200 and "would delete" in dry.text and "rollback-confirm" in dry.text
    assert httpx.get(f"{base}/v1/instants/{dangling}").json()["state"] == "INFLIGHT", "a dry run changes nothing"
    # an instant a later commit came after (as in a running job, by the time the operator looks): the dry run shows
    # what the forced rollback would do, says it needs force, and its confirmation is forced; the real run without force
    # is refused
    older = httpx.post(f"{base}/ui/act/rollback", data={"instant": instants[1], "dry_run": "true"}, headers=AUTH)
    assert older.status_code == 200 and "Needs force" in older.text and 'name="force" value="true"' in older.text
    api_dry = httpx.post(f"{base}/v1/instants/{instants[1]}/rollback", json={"dry_run": True}, headers=AUTH).json()
    assert "needs force" in api_dry["needs_force"] and api_dry["files"]
    assert httpx.post(f"{base}/v1/instants/{instants[1]}/rollback", json={}, headers=AUTH).status_code == 409
    done = httpx.post(
        f"{base}/ui/act/rollback", data={"instant": dangling, "dry_run": "false"}, headers=AUTH, timeout=60
    )
    assert done.status_code == 200 and f"Rolled back commit {dangling}" in done.text
    saved = httpx.post(
        f"{base}/ui/act/savepoint", data={"instant": instants[1], "comment": "before 3"}, headers=AUTH, timeout=60
    )
    assert saved.status_code == 200 and f"Savepoint {instants[1]} created" in saved.text
    assert "Restore" in httpx.get(f"{base}/ui/part/services").text
    restored = httpx.post(f"{base}/ui/act/restore", data={"savepoint": instants[1]}, headers=AUTH, timeout=120)
    assert restored.status_code == 200 and instants[2] in restored.text
    assert rows(hudi_read(table.uri), "id", ["id", "v", "region"]) == states[1]
    bad = httpx.post(f"{base}/ui/act/rollback", data={"instant": "20000101000000000", "dry_run": "true"}, headers=AUTH)
    assert bad.status_code == 404 and 'class="error"' in bad.text


def test_every_error_answers_detail_and_kind(server, written):
    """FastAPI's validation (400, not 422), an unknown path or method, a body too large or of no declared length:
    each answers ``{detail, kind}``; the dashboard's requests get the same as a fragment."""
    base = server.address
    invalid = httpx.get(f"{base}/v1/instants", params={"limit": 0})
    assert invalid.status_code == 400 and invalid.json()["kind"] == "invalid" and "limit" in invalid.json()["detail"]
    assert invalid.json()["errors"][0]["loc"] == ["query", "limit"]
    missing = httpx.get(f"{base}/v1/nothing-here")
    assert missing.status_code == 404 and missing.json()["kind"] == "not_found"
    wrong_method = httpx.put(f"{base}/v1/instants")
    assert wrong_method.status_code == 405 and wrong_method.json()["kind"] == "invalid"
    # a large body is refused from its length, before the token is looked at and before any of it is read
    big = httpx.post(f"{base}/v1/savepoints", content=b"x" * 300_000, headers={"content-type": "application/json"})
    assert big.status_code == 413 and big.json()["kind"] == "invalid" and "api_max_body" in big.json()["detail"]

    def chunks():
        yield b'{"comment": '
        yield b'"x"}'

    chunked = httpx.post(f"{base}/v1/savepoints", content=chunks(), headers=AUTH)
    assert chunked.status_code == 411 and chunked.json()["kind"] == "invalid"
    fragment = httpx.get(f"{base}/ui/part/instant/not-an-instant")
    assert fragment.status_code == 400 and fragment.text.startswith('<p class="error"')


def test_requests_past_the_rate_wait_their_turn_then_get_429(written):
    """Beyond ``max_rate`` a request waits for its turn up to ``queue_seconds``, asleep; past that it is answered
    429 ``busy`` with ``Retry-After``. The ones admitted are spread at the rate."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    from laketide.api.limits import ApiLimits

    table = written[0]
    srv = ApiServer(create_app(table, TOKEN, limits=ApiLimits(max_rate=10, burst=1, queue_seconds=0.5))).start()
    try:
        start = time.monotonic()
        with httpx.Client() as client, ThreadPoolExecutor(20) as pool:
            answers = list(pool.map(lambda _: client.get(f"{srv.address}/healthz"), range(20)))
        took = time.monotonic() - start
    finally:
        srv.stop()
    ok = [a for a in answers if a.status_code == 200]
    busy = [a for a in answers if a.status_code == 429]
    assert len(ok) + len(busy) == 20 and 4 <= len(ok) <= 12 and busy, [
        a.status_code for a in answers
    ]  # 1 at once, then 10 a second
    assert all(a.json()["kind"] == "busy" and a.headers["retry-after"] == "1" for a in busy)
    assert took >= 0.3


def test_a_loopback_server_answers_only_to_loopback_names_and_sends_security_headers(written):
    """A page elsewhere cannot read the API through a DNS name rebound to 127.0.0.1; every answer says nosniff
    and no framing, and the dashboard's a policy that allows only the server's own scripts."""
    from laketide.api.guard import default_hosts

    table = written[0]
    srv = ApiServer(create_app(table, TOKEN, allowed_hosts=default_hosts("127.0.0.1"))).start()
    try:
        foreign = httpx.get(f"{srv.address}/v1/writer", headers={"Host": "rebound.example:80"})
        assert (
            foreign.status_code == 400
            and foreign.json()["kind"] == "invalid"
            and "api_allowed_hosts" in foreign.json()["detail"]
        )
        for name in ("localhost", f"127.0.0.1:{srv.port}"):
            assert httpx.get(f"{srv.address}/healthz", headers={"Host": name}).status_code == 200
        answer = httpx.get(f"{srv.address}/v1/writer")
        assert answer.headers["x-content-type-options"] == "nosniff" and answer.headers["x-frame-options"] == "DENY"
        page = httpx.get(f"{srv.address}/ui")
        assert (
            "script-src" not in page.headers["content-security-policy"]
            and "default-src 'self'" in page.headers["content-security-policy"]
        )
    finally:
        srv.stop()
    assert default_hosts("0.0.0.0") is None and default_hosts("::1") is not None


def test_a_port_in_use_is_refused_naming_it(written):
    """`laketide serve` on a busy port: exit 4 (conflict) with the port and the way out, no traceback."""
    from commands import laketide

    from laketide.api.server import bind

    taken = bind("127.0.0.1", 0)
    try:
        port = taken.getsockname()[1]
        code, out, err = laketide("serve", "--table", written[0].uri, "--port", str(port))
        assert code == 4 and f"port {port} on 127.0.0.1 is in use" in err + out and "Traceback" not in err, (
            code,
            err[-3000:],
        )
    finally:
        taken.close()
