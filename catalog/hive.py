"""A Hive Metastore over Thrift (``hmsclient``), as Hudi's ``HMSDDLExecutor`` drives it: the metastore's own calls,
no HiveQL. One connection, opened on first use and again after a failure, trying the URIs in turn."""

from __future__ import annotations

import contextlib
import logging
import threading
from urllib.parse import urlparse

from laketide.catalog.catalog import CatalogUnavailable
from laketide.catalog.entries import PartitionEntry, TableEntry
from laketide.table.errors import ErrorKind, LaketideError

log = logging.getLogger(__name__)
DEFAULT_PORT = 9083
# partitions asked for at once: the metastore answers a page of them in one reply
PARTITION_PAGE = 1000


class HiveCatalog:
    """A Hive Metastore at ``uris`` (``thrift://host:port``, comma-separated: tried in turn). Its calls are made one
    at a time (a lock): the Thrift connection is not for two threads at once."""

    def __init__(self, uris: str, timeout_seconds: float = 30.0):
        self.addresses = [_address(uri.strip()) for uri in uris.split(",") if uri.strip()]
        if not self.addresses:
            raise LaketideError("catalog.uri names no metastore (thrift://host:9083)", kind=ErrorKind.INVALID)
        self.name = f"hive {uris}"
        self.timeout_seconds = timeout_seconds
        self._client = None
        self._lock = threading.Lock()

    def _call(self, what: str, call):
        from thrift.Thrift import TException

        with self._lock:
            try:
                return call(self._connected())
            except (TException, OSError) as exc:
                if _not_reached(exc):
                    self._drop()
                    raise CatalogUnavailable(f"{self.name}: {what}: {exc}") from exc
                raise LaketideError(f"{self.name}: {what}: {_message(exc)}") from exc

    def _connected(self):
        if self._client is not None:
            return self._client
        from hmsclient import hmsclient
        from thrift.protocol.TBinaryProtocol import TBinaryProtocol
        from thrift.transport.TSocket import TSocket
        from thrift.transport.TTransport import TBufferedTransport, TTransportException

        last: Exception | None = None
        for host, port in self.addresses:
            socket = TSocket(host, port)
            socket.setTimeout(self.timeout_seconds * 1000)  # a metastore that hangs fails the call, not the sync
            client = hmsclient.HMSClient(iprot=TBinaryProtocol(TBufferedTransport(socket)))
            try:
                client.open()
            except TTransportException as exc:
                last = exc
                continue
            self._client = client
            return client
        raise CatalogUnavailable(f"{self.name}: no metastore answered: {last}")

    def _drop(self) -> None:
        if self._client is not None:
            with contextlib.suppress(Exception):  # a connection that failed may not close cleanly
                self._client.close()
            self._client = None

    def close(self) -> None:
        with self._lock:
            self._drop()

    def ensure_database(self, database: str) -> None:
        from hmsclient.genthrift.hive_metastore.ttypes import AlreadyExistsException, Database, NoSuchObjectException

        def ensure(client):
            try:
                client.get_database(database)
            except NoSuchObjectException:
                with contextlib.suppress(AlreadyExistsException):  # another writer made it meanwhile
                    client.create_database(Database(name=database, description="created by laketide", parameters={}))

        self._call(f"database {database}", ensure)

    def table(self, database: str, name: str) -> TableEntry | None:
        from hmsclient.genthrift.hive_metastore.ttypes import NoSuchObjectException

        def get(client):
            try:
                return client.get_table(database, name)
            except NoSuchObjectException:
                return None

        found = self._call(f"table {database}.{name}", get)
        return None if found is None else _entry(found)

    def create_table(self, database: str, entry: TableEntry) -> None:
        self._call(f"create {database}.{entry.name}", lambda client: client.create_table(_table(database, entry)))

    def alter_table(self, database: str, entry: TableEntry, cascade: bool) -> None:
        from hmsclient.genthrift.hive_metastore.ttypes import EnvironmentContext

        # CASCADE takes a new column to the partitions' own column lists too (StatsSetupConst.CASCADE)
        context = EnvironmentContext(properties={"CASCADE": "true"} if cascade else {})
        self._call(
            f"alter {database}.{entry.name}",
            lambda client: client.alter_table_with_environment_context(
                database, entry.name, _table(database, entry), context
            ),
        )

    def partitions(self, database: str, name: str) -> list[PartitionEntry]:
        found = self._call(f"partitions of {database}.{name}", lambda client: client.get_partitions(database, name, -1))
        return [PartitionEntry(tuple(p.values), p.sd.location) for p in found]

    def add_partitions(self, database: str, name: str, partitions: list[PartitionEntry]) -> None:
        if not partitions:
            return

        def add(client):
            table = client.get_table(database, name)
            for start in range(0, len(partitions), PARTITION_PAGE):
                page = partitions[start : start + PARTITION_PAGE]
                client.add_partitions([_partition(database, name, table.sd, p) for p in page])

        self._call(f"add partitions to {database}.{name}", add)

    def drop_partitions(self, database: str, name: str, partitions: list[PartitionEntry]) -> None:
        def drop(client):
            for p in partitions:
                # deleteData false: the files are the table's, and this entry only points at them
                client.drop_partition(database, name, list(p.values), False)

        self._call(f"drop partitions of {database}.{name}", drop)


def _address(uri: str) -> tuple[str, int]:
    parsed = urlparse(uri if "://" in uri else f"thrift://{uri}")
    if parsed.scheme != "thrift" or not parsed.hostname:
        raise LaketideError(f"catalog.uri '{uri}' is not thrift://host:port", kind=ErrorKind.INVALID)
    return parsed.hostname, parsed.port or DEFAULT_PORT


def _not_reached(exc: Exception) -> bool:
    from thrift.transport.TTransport import TTransportException

    return isinstance(exc, (TTransportException, OSError))


def _message(exc: Exception) -> str:
    return getattr(exc, "message", None) or str(exc) or type(exc).__name__


def _descriptor(cols, location: str, input_format: str, output_format: str, serde_info):
    """A storage descriptor as ``HMSDDLExecutor`` fills one: no buckets, no sort, no parameters of its own."""
    from hmsclient.genthrift.hive_metastore.ttypes import StorageDescriptor

    return StorageDescriptor(
        cols=cols,
        location=location,
        inputFormat=input_format,
        outputFormat=output_format,
        serdeInfo=serde_info,
        compressed=False,
        numBuckets=-1,
        bucketCols=[],
        sortCols=[],
        parameters={},
    )


def _table(database: str, entry: TableEntry):
    from hmsclient.genthrift.hive_metastore.ttypes import FieldSchema, SerDeInfo, Table

    sd = _descriptor(
        [FieldSchema(name, kind, "") for name, kind in entry.columns],
        entry.location,
        entry.input_format,
        entry.output_format,
        SerDeInfo(None, entry.serde, dict(entry.serde_parameters)),
    )
    return Table(
        tableName=entry.name,
        dbName=database,
        owner="laketide",
        sd=sd,
        partitionKeys=[FieldSchema(name, kind, "") for name, kind in entry.partition_keys],
        parameters=dict(entry.parameters),
        tableType="EXTERNAL_TABLE",
    )


def _partition(database: str, name: str, table_sd, p: PartitionEntry):
    """A partition at its own location, read as its table is (``HMSDDLExecutor.addPartitionsToTable``)."""
    from hmsclient.genthrift.hive_metastore.ttypes import Partition

    sd = _descriptor(table_sd.cols, p.location, table_sd.inputFormat, table_sd.outputFormat, table_sd.serdeInfo)
    return Partition(values=list(p.values), dbName=database, tableName=name, createTime=0, lastAccessTime=0, sd=sd)


def _entry(table) -> TableEntry:
    sd = table.sd
    return TableEntry(
        table.tableName,
        sd.location,
        [(c.name, c.type) for c in sd.cols],
        [(c.name, c.type) for c in table.partitionKeys or []],
        sd.inputFormat,
        sd.outputFormat,
        sd.serdeInfo.serializationLib,
        dict(sd.serdeInfo.parameters or {}),
        dict(table.parameters or {}),
    )
