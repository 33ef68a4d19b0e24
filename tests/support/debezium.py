"""Debezium change events as the Postgres connector writes them with the JSON converter (Debezium's
documented envelope: ``{"schema": ..., "payload": {"before", "after", "source", "op", "ts_ms"}}``), and
the model of the table they make under event-time merging by LSN."""

from __future__ import annotations

from dataclasses import dataclass, field

ROW_DDL = "id BIGINT, name STRING, amount DOUBLE, region STRING"
COLUMNS = ["id", "name", "amount", "region"]
# the connector's schema of the value, abridged: readers here take the payload, as Kafka Connect's consumers do
SCHEMA = {
    "type": "struct",
    "name": "dbserver.public.orders.Envelope",
    "optional": False,
    "fields": [
        {"field": "before", "type": "struct", "optional": True},
        {"field": "after", "type": "struct", "optional": True},
        {"field": "source", "type": "struct", "optional": False},
        {"field": "op", "type": "string", "optional": False},
        {"field": "ts_ms", "type": "int64", "optional": True},
    ],
}


def row(i: int, version: int, region: str | None = None) -> dict:
    return {
        "id": i,
        "name": f"n{i}-v{version}",
        "amount": round(i * 1.5 + version, 2),
        "region": region or ("us" if i % 2 else "eu"),
    }


def event(op: str, lsn: int, before: dict | None = None, after: dict | None = None) -> dict:
    source = {
        "version": "2.7.0.Final",
        "connector": "postgresql",
        "name": "dbserver",
        "db": "shop",
        "schema": "public",
        "table": "orders",
        "lsn": lsn,
        "ts_ms": 1_700_000_000_000 + lsn,
        "snapshot": "false" if op != "r" else "true",
    }
    return {
        "schema": SCHEMA,
        "payload": {"before": before, "after": after, "source": source, "op": op, "ts_ms": 1_700_000_000_500 + lsn},
    }


@dataclass
class ChangeModel:
    """The table the events make: per key, the event with the highest LSN among those applied wins; a
    delete removes the row, and an older event that arrives after a newer one changes nothing while the
    newer row stands (a delete leaves nothing to compare with, as in Hudi)."""

    rows: dict[int, tuple[int, dict]] = field(default_factory=dict)

    def apply(self, events: list[dict]) -> None:
        newest: dict[int, tuple[int, dict]] = {}
        for e in events:
            payload = e["payload"]
            if payload["op"] not in ("c", "r", "u", "d"):
                continue
            image = payload["before"] if payload["op"] == "d" else payload["after"]
            if image is None or image.get("id") is None:
                continue
            lsn = payload["source"]["lsn"]
            if image["id"] not in newest or lsn >= newest[image["id"]][0]:
                newest[image["id"]] = (lsn, e)
        for key, (lsn, e) in newest.items():
            if key in self.rows and self.rows[key][0] > lsn:
                continue
            if e["payload"]["op"] == "d":
                self.rows.pop(key, None)
            else:
                self.rows[key] = (lsn, e["payload"]["after"])

    def expected(self) -> list[dict]:
        return [{c: self.rows[k][1][c] for c in COLUMNS} for k in sorted(self.rows)]
