from __future__ import annotations

import itertools

import pytest

from laketide.table.format.instant import COMMIT, Instant, InstantClock, State, validate_instant_time
from laketide.table.format.properties import TableConfig, format_properties, parse_properties, table_checksum


def test_ten_thousand_instant_times_are_unique_and_increasing():
    clock = InstantClock()
    times = [clock.next() for _ in range(10_000)]
    assert all(len(t) == 17 and t.isdigit() for t in times)
    assert all(a < b for a, b in itertools.pairwise(times))
    for t in times[::997]:
        validate_instant_time(t)


def test_clock_stays_ahead_of_the_timeline_and_a_frozen_wall_clock():
    clock = InstantClock(now_ms=lambda: 0)
    assert clock.next(after="20991231235959998") == "20991231235959999"
    assert clock.next() == "21000101000000000"


@pytest.mark.parametrize(
    "name,expected",
    [
        ("20240418172802262.commit", Instant("20240418172802262", "commit", State.COMPLETED)),
        ("20240418172802262.inflight", Instant("20240418172802262", "commit", State.INFLIGHT)),
        ("20240418172802262.commit.requested", Instant("20240418172802262", "commit", State.REQUESTED)),
        ("20240418172802262.replacecommit.inflight", Instant("20240418172802262", "replacecommit", State.INFLIGHT)),
        ("20240418172802262.rollback", Instant("20240418172802262", "rollback", State.COMPLETED)),
        ("20250331030642808.deltacommit", Instant("20250331030642808", "deltacommit", State.COMPLETED)),
        ("hoodie.properties", None),
        (".aux", None),
        ("20240418172802262.commit.crc", None),
    ],
)
def test_timeline_file_names(name, expected):
    assert Instant.parse_file_name(name, 1) == expected
    if expected is not None:
        assert expected.file_name(1) == name


def test_v8_names_carry_completion_time():
    inst = Instant.parse_file_name("20250713011315930_20250713011316231.commit", 2)
    assert inst == Instant("20250713011315930", COMMIT, State.COMPLETED, "20250713011316231")
    assert inst.file_name(2) == "20250713011315930_20250713011316231.commit"
    assert Instant.parse_file_name("20250713011315930.commit", 2) is None
    assert Instant.parse_file_name("20250713011315930_20250713011316231.commit", 1) is None


def test_bad_instant_time_is_rejected():
    for bad in ("2024", "2024041817280226x", "20241318172802262"):
        with pytest.raises(ValueError):
            validate_instant_time(bad)


def test_properties_round_trip_with_escapes():
    props = {"a.key": "x:y=z", "schema": '{"type":"record"}', "spaced": " lead", "uni": "ü"}
    assert parse_properties(format_properties(props)) == props


def test_fixture_properties_parse(fixtures_dir):
    text = (fixtures_dir / "v6_simplekeygen_nonhivestyle" / ".hoodie" / "hoodie.properties").read_text()
    config = TableConfig.from_properties(parse_properties(text))
    assert config.name == "v6_simplekeygen_nonhivestyle"
    assert config.record_key_fields == ["id"] and config.partition_fields == ["byteField"]
    assert config.ordering_field == "longField" and config.version == 6
    assert config.create_schema.startswith('{"type":"record"')
    assert int(config.extra["hoodie.table.checksum"]) == table_checksum("default", config.name)


def test_written_properties_hold_what_readers_require():
    config = TableConfig(name="t", record_key_fields=["id"], partition_fields=["region"], ordering_field="ts")
    props = parse_properties(format_properties(config.to_properties()))
    for key in ("hoodie.table.name", "hoodie.table.type", "hoodie.table.version", "hoodie.timeline.layout.version"):
        assert key in props
    assert props["hoodie.timeline.layout.version"] == "1"
    assert props["hoodie.table.partition.fields"] == "region"
    assert TableConfig.from_properties(props).model_dump(exclude={"extra"}) == config.model_dump(exclude={"extra"})


def test_missing_required_property_is_named():
    with pytest.raises(ValueError, match=r"hoodie.table.version"):
        TableConfig.from_properties({"hoodie.table.name": "t", "hoodie.table.type": "COPY_ON_WRITE"})


@pytest.mark.parametrize(
    "given, instant",
    [
        ("20261122221508812", "20261122221508812"),
        ("20261122221508", "20261122221508000"),
        ("2026-11-22 22:15:08.812", "20261122221508812"),
        ("2026-11-22 22:15:08", "20261122221508000"),
        ("2026-11-22", "20261122000000000"),
        ("2026-11-22T23:15:08.812+01:00", "20261122221508812"),
        ("2026-11-22T22:15:08Z", "20261122221508000"),
        ("1795385708", "20261122221508000"),
        ("1795385708812", "20261122221508812"),
    ],
)
def test_time_travel_accepts_the_forms_hudi_accepts(given, instant):
    from laketide.table.format.instant import parse_instant_time

    assert parse_instant_time(given) == instant


@pytest.mark.parametrize("given", ["yesterday", "2026-13-01", "2026112222150881", "22:15:08", ""])
def test_other_time_travel_forms_fail_clearly(given):
    from laketide.table.format.instant import parse_instant_time

    with pytest.raises(ValueError, match=r"not a point in time|instant time"):
        parse_instant_time(given)
