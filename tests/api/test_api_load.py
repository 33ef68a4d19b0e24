"""The API under load beside a job writing 20,000-row micro-batches: 32 clients asking flat out get no 5xx,
and the table is what the generator's model says. The micro-batch medians idle and under load are printed;
the figure itself is ``make bench-api``'s (timing is not a test's business on a shared machine)."""

from __future__ import annotations

import argparse
import sys

from fixture_tables import REPO

sys.path.insert(0, str(REPO / "bench"))


def test_32_clients_flat_out_get_no_server_error_and_the_table_stays_right(monkeypatch, tmp_path):
    import api_bench

    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
    args = argparse.Namespace(
        clients=32, seconds=10, rounds=1, rows=20_000, warmup=3, max_batches=1000, conf=[], workdir=str(tmp_path)
    )
    result = api_bench.run(args)
    print(
        f"micro-batch median idle {result['idle_median_s']} s, under 32 clients {result['load_median_s']} s "
        f"({result['ratio']}x); "
        f"answers {result['statuses']}, p50 {result['answer_p50_s']} s, p99 {result['answer_p99_s']} s"
    )
    assert result["server_errors"] == 0, result["statuses"]
    assert result["answers"] and result["load_batches"] and result["idle_batches"]
    assert result["verified"], "hudi-rs does not read the generator's model"
