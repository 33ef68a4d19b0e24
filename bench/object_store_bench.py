"""Object-store benchmark: laketide (copy-on-write and merge-on-read) against delta-rs MERGE, both on one
S3-protocol server (moto's, started here on 127.0.0.1), on ``make bench``'s workload.

Both engines reach the server through one counting proxy (``tests/support/faultproxy.py`` with no faults), so the
requests of each micro-batch are counted by kind (GET, PUT, LIST, DELETE, HEAD) the same way for both,
and for the whole laketide job (driver and Spark's tasks). The run:
- the initial load, then ``--batches`` upserts of ``--batch-rows``: their median latency, and the ratio;
- then small upserts of ``--history-rows`` until the table has ``--history`` micro-batches: the requests
  of the small upserts at the start of that stretch and at its end, to show what grows with history.
Every table is read back (hudi-rs, delta-rs) and compared with the expected rows; the JSON goes to ``--out``.

    python bench/object_store_bench.py                              # N=1,000,000, K=10, B=100,000, to 200 micro-batches
    python bench/object_store_bench.py --rows 100000 --batch-rows 10000 --history 40
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the counting proxy
from faultproxy import FaultProxy
from upsert_bench import (
    NARROW,
    Result,
    _matches,
    dedupe,
    expected_state,
    laketide_config,
    land,
    print_table,
    write_results,
)

KINDS = ("GET", "PUT", "LIST", "DELETE", "HEAD")
WINDOW = 10  # small upserts per end of the history stretch whose requests are compared


def start_s3():
    """moto's S3 server on a free loopback port, with the bucket ``bench``; (server, endpoint)."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id="bench", aws_secret_access_key="bench", region_name="us-east-1"
    ).create_bucket(Bucket="bench")
    return server, endpoint


def store_options(endpoint: str) -> dict[str, str]:
    return {
        "aws_endpoint_url": endpoint,
        "aws_access_key_id": "bench",
        "aws_secret_access_key": "bench",
        "aws_region": "us-east-1",
        "allow_http": "true",
    }


class Engine(Result):
    """A ``Result`` plus the requests of each micro-batch, as the proxy counted them."""

    def __init__(self, engine: str):
        super().__init__(engine, 0.0)
        self.requests: list[dict[str, int]] = []

    def requests_at(self, batches: slice) -> dict[str, float]:
        window = self.requests[batches]
        return {kind: statistics.median(r.get(kind, 0) for r in window) for kind in KINDS}


def _since(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {kind: after.get(kind, 0) - before.get(kind, 0) for kind in KINDS}


def run_laketide(
    workdir: Path, landing: Path, expected: pa.Table, args, proxy: FaultProxy, direct: dict, table_type: str
) -> Engine:
    from hudi import HudiTableBuilder

    from laketide.spark.job import run

    name = "cow" if table_type == "COPY_ON_WRITE" else "mor"
    uri = f"s3://bench/laketide-{name}"
    options = [f"storage.options.{k}={v}" for k, v in store_options(proxy.endpoint).items()]
    config = laketide_config(
        Path(f"/laketide_{name}"),
        workdir / f"checkpoint-{name}",
        landing,
        args.parallelism,
        (f"table.type={table_type}", "coordinator.lease=storage", *options),
    )
    config.table.path = uri
    result, marks = Engine(f"laketide {name}"), [proxy.snapshot()]

    def observe(report) -> None:
        marks.append(proxy.snapshot())
        if not report.skipped:
            result.batch_seconds.append(report.seconds)
            result.requests.append(_since(marks[-2], marks[-1]))

    run(config, on_ready=lambda job: job.writer.observers.append(observe))
    result.load_seconds = result.batch_seconds.pop(0)
    result.requests.pop(0)
    hudi_rows = pa.Table.from_batches(HudiTableBuilder.from_base_uri(uri).with_storage_options(direct).build().read())
    result.verified = _matches(hudi_rows, expected)
    return result


def run_delta(batches: list[pa.Table], expected: pa.Table, proxy: FaultProxy, direct: dict) -> Engine:
    from deltalake import DeltaTable, write_deltalake

    uri, options = "s3://bench/delta", {**store_options(proxy.endpoint), "aws_conditional_put": "etag"}
    result = Engine("delta-rs")
    started = time.perf_counter()
    write_deltalake(uri, dedupe(batches[0]), partition_by=["region"], storage_options=options)
    result.load_seconds = time.perf_counter() - started
    for batch in batches[1:]:
        before, started = proxy.snapshot(), time.perf_counter()
        (
            DeltaTable(uri, storage_options=options)
            .merge(
                source=dedupe(batch),
                predicate="t.id = s.id AND t.region = s.region",
                source_alias="s",
                target_alias="t",
            )
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )
        result.batch_seconds.append(time.perf_counter() - started)
        result.requests.append(_since(before, proxy.snapshot()))
    result.verified = _matches(
        DeltaTable(uri, storage_options={**direct, "aws_conditional_put": "etag"}).to_pyarrow_table(), expected
    )
    return result


def summarize(engines: list[Engine], args) -> dict:
    big = slice(0, args.batches)
    early = slice(args.batches, args.batches + WINDOW)
    late = slice(-WINDOW, None)
    first_history, last_history = args.batches + 1 + WINDOW, args.history
    rows = [
        {
            "engine": e.engine,
            "median_batch_seconds": round(statistics.median(e.batch_seconds[big]), 2),
            "small_batch_seconds": round(statistics.median(e.batch_seconds[late]), 2),
            "verified": e.verified,
        }
        for e in engines
    ]
    requests = {
        e.engine: {f"at {first_history}": e.requests_at(early), f"at {last_history}": e.requests_at(late)}
        for e in engines
    }
    return {"results": rows, "requests_per_micro_batch": requests, "history": [first_history, last_history]}


def main() -> None:
    parser = argparse.ArgumentParser(description="laketide vs delta-rs upserts on an S3 server")
    parser.add_argument("--rows", type=int, default=1_000_000, help="initial load N")
    parser.add_argument("--batches", type=int, default=10, help="upsert batches K, timed")
    parser.add_argument("--batch-rows", type=int, default=100_000, help="rows per batch B")
    parser.add_argument(
        "--history", type=int, default=200, help="micro-batches of history at the end (small upserts fill it)"
    )
    parser.add_argument("--history-rows", type=int, default=1_000, help="rows per small upsert")
    parser.add_argument("--update-share", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--parallelism", type=int, default=4)
    parser.add_argument("--table-types", default="COPY_ON_WRITE,MERGE_ON_READ")
    parser.add_argument("--out", default="bench/results/object_store_bench.json")
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    small = args.history - args.batches - 1
    if small < 2 * WINDOW:
        parser.error(
            f"--history must leave at least {2 * WINDOW} small upserts after the load and the {args.batches} timed ones"
        )

    from upsert_bench import make_workload

    batches = make_workload(
        args.rows,
        args.batches,
        args.batch_rows,
        args.update_share,
        "uniform",
        args.seed,
        NARROW,
        then=(small, args.history_rows),
    )
    expected = expected_state(batches)
    server, endpoint = start_s3()
    proxy = FaultProxy(endpoint.removeprefix("http://")).start()
    direct = store_options(endpoint)
    workdir = Path(tempfile.mkdtemp(prefix="laketide-s3-bench-"))
    try:
        landing = workdir / "landing"
        landing.mkdir()
        land(landing, batches, args.rows)
        print(
            f"workload: N={args.rows:,} K={args.batches} B={args.batch_rows:,}, then {small} upserts of "
            f"{args.history_rows:,} "
            f"to {args.history} micro-batches; final rows {expected.num_rows:,}",
            flush=True,
        )
        engines = [run_delta(batches, expected, proxy, direct)]
        print(
            f"delta-rs done: median {statistics.median(engines[0].batch_seconds[: args.batches]):.2f}s per timed batch",
            flush=True,
        )
        for table_type in args.table_types.split(","):
            engines.append(run_laketide(workdir, landing, expected, args, proxy, direct, table_type.strip().upper()))
            print(
                f"{engines[-1].engine} done: median "
                f"{statistics.median(engines[-1].batch_seconds[: args.batches]):.2f}s per timed batch",
                flush=True,
            )
    finally:
        proxy.stop()
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    summary = summarize(engines, args)
    base = summary["results"][0]
    ratios = {
        r["engine"]: round(r["median_batch_seconds"] / base["median_batch_seconds"], 2) for r in summary["results"][1:]
    }
    print_table(summary["results"], "median batch seconds, laketide / delta-rs", ratios)
    early, late = (f"at {n}" for n in summary["history"])
    print(
        f"\nrequests per small upsert (median of {WINDOW}), at {summary['history'][0]} and at "
        f"{summary['history'][1]} micro-batches of history:"
    )
    print(f"{'engine':<16} " + " ".join(f"{kind + ' ' + when:>14}" for kind in KINDS for when in ("early", "late")))
    for engine, counts in summary["requests_per_micro_batch"].items():
        print(f"{engine:<16} " + " ".join(f"{counts[w][kind]:>14g}" for kind in KINDS for w in (early, late)))
    payload = {"workload": vars(args), **summary, "ratio_laketide_to_delta": ratios}
    write_results(args.out, payload, all(r["verified"] for r in summary["results"]))


if __name__ == "__main__":
    main()
