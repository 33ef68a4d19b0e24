"""schemathesis against the served OpenAPI schema: no 5xx, and every answer matches the schema."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from writes import history

from laketide.api.app import create_app
from laketide.api.server import ApiServer
from laketide.coordinator import LocalLease


@pytest.fixture(scope="module")
def api_schema(tmp_path_factory):
    table = history(tmp_path_factory.mktemp("schema") / "t", width=5)[0]
    server = ApiServer(create_app(table, "t0ken", lease_factory=lambda: LocalLease.for_table(table.uri))).start()
    yield schemathesis.openapi.from_url(f"{server.address}/openapi.json")
    server.stop()


def test_api_conforms_to_its_schema(api_schema):
    checked = []
    for result in api_schema.get_all_operations():
        operation = result.ok()

        @given(case=operation.as_strategy())
        @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def check(case):
            response = case.call_and_validate()
            assert response.status_code < 500

        check()
        checked.append(operation.label)
    assert sorted(checked) == sorted(
        [
            "GET /healthz",
            "GET /metrics",
            "GET /v1/instants",
            "GET /v1/instants/{instant}",
            "GET /v1/file-groups",
            "GET /v1/partitions",
            "GET /v1/timeline",
            "GET /v1/tables",
            "GET /v1/services",
            "GET /v1/layout",
            "GET /v1/layout/file-groups",
            "GET /v1/quarantine",
            "GET /v1/writer",
            "GET /v1/lease",
            "POST /v1/instants/{instant}/rollback",
            "GET /v1/savepoints",
            "POST /v1/savepoints",
            "DELETE /v1/savepoints/{instant}",
            "POST /v1/restore",
        ]
    ), "every operation was checked"
