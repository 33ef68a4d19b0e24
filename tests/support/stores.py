"""Object-store servers the tests start on 127.0.0.1 and stop themselves: moto's S3 server and Azurite's
Blob service; and what the tests of tables on them share."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pyarrow as pa
import pytest
from chaoslib import free_port
from fixture_tables import REPO
from streaming import DATA_COLUMNS


@pytest.fixture(scope="module")
def s3():
    """moto's S3 server on a free loopback port, with one bucket; the options every reader and writer takes."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    credentials = {"aws_access_key_id": "laketide", "aws_secret_access_key": "laketide", "region_name": "us-east-1"}
    boto3.client("s3", endpoint_url=endpoint, **credentials).create_bucket(Bucket="lake")
    yield {
        "aws_endpoint_url": endpoint,
        "aws_access_key_id": "laketide",
        "aws_secret_access_key": "laketide",
        "aws_region": "us-east-1",
        "allow_http": "true",
    }
    server.stop()


# Azurite's well-known account key
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
AZURITE = REPO / ".tools" / "node_modules" / ".bin" / "azurite-blob"


@contextlib.contextmanager
def npm_server(program: Path, arguments: list[str], port: int):
    """One of the servers ``deploy/install-test-servers.sh`` installs from npm, started on ``port`` in a session of
    its own (its children go with it), answering once the port does; stopped on the way out."""
    if not program.exists():
        pytest.fail(f"{program} is missing: run deploy/install-test-servers.sh (make test does)")
    server = subprocess.Popen(
        [str(program), *arguments], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        wait_for_port(port)
        yield server
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


@pytest.fixture(scope="module")
def azurite(tmp_path_factory):
    """Azurite's Blob service (from npm, installed by ``make test``) on a free loopback port, with one container."""
    from azure.storage.blob import BlobServiceClient

    port, data = free_port(), tmp_path_factory.mktemp("azurite")
    arguments = ["--blobHost", "127.0.0.1", "--blobPort", str(port), "--location", str(data)]
    with npm_server(AZURITE, [*arguments, "--skipApiVersionCheck", "--silent"], port):
        endpoint = f"http://127.0.0.1:{port}/devstoreaccount1"
        connection = (
            f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={AZURITE_KEY};"
            f"BlobEndpoint={endpoint};"
        )
        BlobServiceClient.from_connection_string(connection).create_container("lake")
        yield {
            "azure_storage_account_name": "devstoreaccount1",
            "azure_storage_account_key": AZURITE_KEY,
            "azure_endpoint": endpoint,
            "allow_http": "true",
        }


S3RVER = REPO / ".tools" / "node_modules" / ".bin" / "s3rver"


@pytest.fixture(scope="module")
def s3rver(tmp_path_factory):
    """s3rver (from npm, installed by ``make test``; it ignores ``If-None-Match`` and ``If-Match``) on a free
    loopback port, with one bucket; the options every reader and writer takes."""
    import boto3

    port, data = free_port(), tmp_path_factory.mktemp("s3rver")
    arguments = ["-d", str(data), "-a", "127.0.0.1", "-p", str(port), "--silent", "--no-vhost-buckets"]
    with npm_server(S3RVER, arguments, port):
        endpoint = f"http://127.0.0.1:{port}"
        credentials = {"aws_access_key_id": "S3RVER", "aws_secret_access_key": "S3RVER"}
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", **credentials).create_bucket(Bucket="lake")
        yield {"aws_endpoint_url": endpoint, **credentials, "aws_region": "us-east-1", "allow_http": "true"}


def wait_for_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"nothing listens on 127.0.0.1:{port} after {timeout:.0f}s")


def hudi_read_store(uri: str, options: dict) -> pa.Table:
    from hudi import HudiTableBuilder

    table = HudiTableBuilder.from_base_uri(uri).with_storage_options(options).build()
    return pa.Table.from_batches(table.read())


def expected_rows(batches: list[list[dict]]) -> list[dict]:
    """Event-time ordering across writes: the highest ordering value wins (a tie: the later row), so a
    late row changes nothing; a delete that wins drops the key."""
    newest: dict[int, dict] = {}
    for lines in batches:
        for line in lines:
            current = newest.get(line["id"])
            if current is None or line["ts"] >= current["ts"]:
                newest[line["id"]] = line
    return [
        {c: line.get(c) for c in DATA_COLUMNS}
        for _, line in sorted(newest.items())
        if not line.get("_hoodie_is_deleted")
    ]
