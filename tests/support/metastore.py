"""A Hive Metastore for the catalog tests: Hive 2.3's, from the jars inside the pyspark wheel, on embedded Derby
in a folder of the test's, listening on 127.0.0.1 (``LoopbackMetastore.java``), with the Thrift client the sync
uses (``hmsclient``) to read back what was registered."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import pyspark
import pytest

HERE = Path(__file__).resolve().parent
JARS = Path(pyspark.__file__).parent / "jars"
HIVE_SITE = """<configuration>
<property><name>javax.jdo.option.ConnectionURL</name><value>jdbc:derby:;databaseName={root}/metastore_db;create=true</value></property>
<property><name>datanucleus.schema.autoCreateAll</name><value>true</value></property>
<property><name>hive.metastore.schema.verification</name><value>false</value></property>
<property><name>hive.async.log.enabled</name><value>false</value></property>
<property><name>hive.metastore.warehouse.dir</name><value>{root}/warehouse</value></property>
</configuration>
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Metastore:
    """One metastore process; ``uri`` is where it answers."""

    def __init__(self, root: Path):
        self.root = root
        self.port = _free_port()
        self.uri = f"thrift://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 120.0) -> Metastore:
        if shutil.which("javac") is None:
            raise RuntimeError("the test metastore runs from source and needs a JDK (deploy/install-system-deps.sh)")
        conf = self.root / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        (conf / "hive-site.xml").write_text(HIVE_SITE.format(root=self.root))
        log = (self.root / "metastore.log").open("ab")
        self.process = subprocess.Popen(
            ["java", "-cp", f"{JARS}/*:{conf}", str(HERE / "LoopbackMetastore.java"), "127.0.0.1", str(self.port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.root,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the metastore exited {self.process.returncode}: see {self.root / 'metastore.log'}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return self
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"the metastore did not answer in {timeout:.0f} s: see {self.root / 'metastore.log'}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def client(self):
        """A Thrift client of the metastore's own API, opened (a context manager)."""
        from hmsclient import hmsclient

        return hmsclient.HMSClient(host="127.0.0.1", port=self.port)


@pytest.fixture(scope="module")
def metastore(tmp_path_factory):
    """A metastore of the module's own."""
    try:
        server = Metastore(tmp_path_factory.mktemp("metastore")).start()
    except RuntimeError as exc:
        pytest.fail(str(exc))
    yield server
    server.stop()
