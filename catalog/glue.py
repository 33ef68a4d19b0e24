"""AWS Glue's Data Catalog (boto3), holding the same entries a Hive Metastore would, as Hudi's
``AWSGlueCatalogSyncClient`` (``hudi-aws/.../sync/AWSGlueCatalogSyncClient.java``) writes them: a table input with
its storage descriptor and parameters, partitions created and deleted in batches (Glue takes at most 100 a call
to create, 25 to delete)."""

from __future__ import annotations

import contextlib

from laketide.catalog.catalog import CatalogUnavailable
from laketide.catalog.entries import PartitionEntry, TableEntry
from laketide.table.errors import ErrorKind, LaketideError

CREATE_BATCH, DELETE_BATCH = 100, 25
# the storage options' AWS names, as boto3 takes them
OPTION_NAMES = {
    "aws_region": "region_name",
    "region": "region_name",
    "aws_endpoint_url": "endpoint_url",
    "aws_endpoint": "endpoint_url",
    "endpoint_url": "endpoint_url",
    "aws_access_key_id": "aws_access_key_id",
    "aws_secret_access_key": "aws_secret_access_key",
    "aws_session_token": "aws_session_token",
}


class GlueCatalog:
    """Glue in the account and region ``options`` reach (the storage options' AWS names; what is not given comes
    from boto3's own chain: the environment, the instance's role)."""

    def __init__(self, options: dict[str, str] | None = None):
        try:
            import boto3
        except ImportError:
            raise LaketideError(
                "catalog.kind = 'glue' needs boto3: pip install 'laketide[glue]'", kind=ErrorKind.INVALID
            ) from None
        given = {OPTION_NAMES[k.lower()]: v for k, v in (options or {}).items() if k.lower() in OPTION_NAMES}
        self._client = boto3.client("glue", **given)
        # credentials never go into a name that reaches logs, the API or /metrics
        self.name = f"glue {given.get('endpoint_url') or given.get('region_name') or self._client.meta.region_name}"

    def _call(self, what: str, call):
        from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

        try:
            return call(self._client)
        except EndpointConnectionError as exc:
            raise CatalogUnavailable(f"{self.name}: {what}: {exc}") from exc
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("ThrottlingException", "InternalServiceException", "ServiceUnavailableException"):
                raise CatalogUnavailable(f"{self.name}: {what}: {code}") from exc
            raise LaketideError(f"{self.name}: {what}: {exc}") from exc
        except BotoCoreError as exc:
            raise CatalogUnavailable(f"{self.name}: {what}: {exc}") from exc

    def close(self) -> None:
        pass  # boto3's client holds a pool, no session to end

    def ensure_database(self, database: str) -> None:
        def ensure(client):
            try:
                client.get_database(Name=database)
            except client.exceptions.EntityNotFoundException:
                with contextlib.suppress(client.exceptions.AlreadyExistsException):  # another writer made it
                    client.create_database(DatabaseInput={"Name": database, "Description": "created by laketide"})

        self._call(f"database {database}", ensure)

    def table(self, database: str, name: str) -> TableEntry | None:
        def get(client):
            try:
                return client.get_table(DatabaseName=database, Name=name)["Table"]
            except client.exceptions.EntityNotFoundException:
                return None

        found = self._call(f"table {database}.{name}", get)
        return None if found is None else _entry(found)

    def create_table(self, database: str, entry: TableEntry) -> None:
        self._call(
            f"create {database}.{entry.name}",
            lambda client: client.create_table(DatabaseName=database, TableInput=_table_input(entry)),
        )

    def alter_table(self, database: str, entry: TableEntry, cascade: bool) -> None:
        # Glue's partitions keep their own storage descriptors; Hudi's Glue sync updates the table alone
        self._call(
            f"alter {database}.{entry.name}",
            lambda client: client.update_table(DatabaseName=database, TableInput=_table_input(entry)),
        )

    def partitions(self, database: str, name: str) -> list[PartitionEntry]:
        def listed(client):
            pages = client.get_paginator("get_partitions").paginate(DatabaseName=database, TableName=name)
            return [p for page in pages for p in page["Partitions"]]

        found = self._call(f"partitions of {database}.{name}", listed)
        return [PartitionEntry(tuple(p["Values"]), p["StorageDescriptor"]["Location"]) for p in found]

    def add_partitions(self, database: str, name: str, partitions: list[PartitionEntry]) -> None:
        if not partitions:
            return
        entry = self.table(database, name)
        if entry is None:
            raise LaketideError(f"{self.name}: {database}.{name} is gone", kind=ErrorKind.NOT_FOUND)

        def add(client):
            for start in range(0, len(partitions), CREATE_BATCH):
                page = partitions[start : start + CREATE_BATCH]
                inputs = [{"Values": list(p.values), "StorageDescriptor": _descriptor(entry, p.location)} for p in page]
                answer = client.batch_create_partition(DatabaseName=database, TableName=name, PartitionInputList=inputs)
                _raise_errors(answer, "create", ignore="AlreadyExistsException")

        self._call(f"add partitions to {database}.{name}", add)

    def drop_partitions(self, database: str, name: str, partitions: list[PartitionEntry]) -> None:
        def drop(client):
            for start in range(0, len(partitions), DELETE_BATCH):
                page = [{"Values": list(p.values)} for p in partitions[start : start + DELETE_BATCH]]
                answer = client.batch_delete_partition(DatabaseName=database, TableName=name, PartitionsToDelete=page)
                _raise_errors(answer, "delete", ignore="EntityNotFoundException")

        self._call(f"drop partitions of {database}.{name}", drop)


def _raise_errors(answer: dict, what: str, ignore: str) -> None:
    errors = [e for e in answer.get("Errors", []) if e.get("ErrorDetail", {}).get("ErrorCode") != ignore]
    if errors:
        first = errors[0]
        raise LaketideError(
            f"{what} of {len(errors)} partitions failed, the first {first.get('PartitionValues')}: "
            f"{first.get('ErrorDetail', {}).get('ErrorMessage')}"
        )


def _descriptor(entry: TableEntry, location: str) -> dict:
    return {
        "Columns": [{"Name": name, "Type": kind} for name, kind in entry.columns],
        "Location": location,
        "InputFormat": entry.input_format,
        "OutputFormat": entry.output_format,
        "SerdeInfo": {"SerializationLibrary": entry.serde, "Parameters": dict(entry.serde_parameters)},
    }


def _table_input(entry: TableEntry) -> dict:
    return {
        "Name": entry.name,
        "StorageDescriptor": _descriptor(entry, entry.location),
        "PartitionKeys": [{"Name": name, "Type": kind} for name, kind in entry.partition_keys],
        "TableType": "EXTERNAL_TABLE",
        "Parameters": dict(entry.parameters),
    }


def _entry(table: dict) -> TableEntry:
    sd = table.get("StorageDescriptor", {})
    serde = sd.get("SerdeInfo", {})
    return TableEntry(
        table["Name"],
        sd.get("Location", ""),
        [(c["Name"], c["Type"]) for c in sd.get("Columns", [])],
        [(c["Name"], c["Type"]) for c in table.get("PartitionKeys", [])],
        sd.get("InputFormat", ""),
        sd.get("OutputFormat", ""),
        serde.get("SerializationLibrary", ""),
        dict(serde.get("Parameters", {})),
        dict(table.get("Parameters", {})),
    )
