"""The demo path: the job on its built-in generator source, checked against the generator's own rows."""

from __future__ import annotations

from readback import hudi_read

from laketide.cli.jobs import embedded_defaults
from laketide.config import load_config
from laketide.spark.generator import GeneratorSpec, generate
from laketide.spark.job import run

ROWS, BATCHES = 3000, 3


def expected_rows(spec: GeneratorSpec) -> dict[int, dict]:
    model: dict[int, dict] = {}
    for b in range(spec.batches):
        best: dict[int, tuple[int, int, dict]] = {}
        for pos, r in enumerate(generate(spec, b * spec.rows_per_batch, (b + 1) * spec.rows_per_batch).to_pylist()):
            if r["id"] not in best or (r["ts"], pos) > best[r["id"]][:2]:
                best[r["id"]] = (r["ts"], pos, r)
        for key, (_, _, r) in best.items():
            if r["_hoodie_is_deleted"]:
                model.pop(key, None)
            else:
                model[key] = r
    return model


def test_generator_micro_batches_match_the_generated_changes(spark, tmp_path):
    config = load_config(
        base=embedded_defaults([]),
        overrides=[
            f"table.path={tmp_path / 'table'}",
            f"stream.checkpoint={tmp_path / 'checkpoint'}",
            f"source.generator.rows_per_batch={ROWS}",
            f"source.generator.batches={BATCHES}",
        ],
    )
    writer = run(config)
    reports = writer.status.recent
    assert [r.records for r in reports] == [ROWS] * BATCHES
    assert reports[-1].updates > 0 and reports[-1].deletes > 0

    model = expected_rows(GeneratorSpec(rows_per_batch=ROWS, batches=BATCHES))
    table = hudi_read(tmp_path / "table")
    got = {r["id"]: (r["ts"], r["name"], r["region"]) for r in table.to_pylist()}
    assert table.num_rows == len(got) == len(model)
    assert got == {k: (r["ts"], r["name"], r["region"]) for k, r in model.items()}
    # one task writes several file groups; the sequence numbers of an instant are still unique, as Hudi's
    stamps = list(zip(table["_hoodie_commit_time"].to_pylist(), table["_hoodie_commit_seqno"].to_pylist()))
    assert len(set(stamps)) == len(stamps)
    assert len({t for t, _ in stamps}) == BATCHES, "every instant still has rows, so each is checked"
