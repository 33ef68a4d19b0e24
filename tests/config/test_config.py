from __future__ import annotations

import pytest
from fixture_tables import REPO

from laketide.config import KAFKA_RECORD_BYTES, ConfigError, load_config

REQUIRED = ["table.path=/data/t", 'table.record_key=["id"]']


def test_toml_file_with_overrides(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text(
        """
[table]
path = "/data/orders"
name = "orders"
record_key = ["id"]
partition_by = ["region"]
ordering_field = "ts"

[source]
format = "json"
path = "/landing"
schema = "id BIGINT, ts BIGINT, region STRING"

[write]
target_file_size = "64MB"
small_file_limit = "16MB"
"""
    )
    config = load_config(
        path, ["write.index_shards=32", "stream.trigger=available-now", "spark.conf.spark.sql.shuffle.partitions=3"]
    )
    assert config.table.partition_by == ["region"]
    assert config.source.schema_ddl.startswith("id BIGINT")
    assert config.write.target_file_size == 64 * 2**20 and config.write.small_file_limit == 16 * 2**20
    assert config.write.index_shards == 32
    assert config.stream.trigger == "available-now"
    assert config.spark.conf == {"spark.sql.shuffle.partitions": "3"}


@pytest.mark.parametrize(
    "overrides,named",
    [
        ([], "table"),
        ([*REQUIRED, "write.index_shards=0"], "write.index_shards"),
        ([*REQUIRED, "source.format=avro"], "'json', 'parquet', 'csv', 'generator' or 'kafka'"),
        ([*REQUIRED, "write.colour=blue"], "write.colour"),
        ([*REQUIRED, "stream.trigger=soon"], "available-now"),
        ([*REQUIRED, "source.format=json"], "source.path is required"),
        ([*REQUIRED, "write.target_file_size=lots"], "write.target_file_size"),
        ([*REQUIRED, "write.small_file_limit=1GB"], "small_file_limit must not exceed"),
        ([*REQUIRED, "coordinator.lease=etcd"], "coordinator.lease"),
        ([*REQUIRED, "table.name=my-orders"], "not a valid table name"),
        ([*REQUIRED, "table.type=MOR"], "table.type"),
        ([*REQUIRED, "compaction.mode=later"], "compaction.mode"),
        (["nonsense"], "section.key=value"),
    ],
)
def test_bad_config_names_the_key(overrides, named):
    with pytest.raises(ConfigError) as info:
        load_config(overrides=overrides)
    assert named in str(info.value)


def test_missing_and_broken_files(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[table\npath=")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


def test_example_job_config_in_deploy_is_valid():

    config = load_config(REPO / "deploy" / "job.example.toml")
    assert config.coordinator.lease == "zookeeper" and config.coordinator.api_port == 8470
    on_s3 = load_config(REPO / "deploy" / "job.s3.example.toml")
    assert on_s3.coordinator.lease == "storage" and on_s3.table.path.startswith("s3://")
    assert on_s3.storage.io_options == {"aws_region": "eu-west-1", "max_retries": "10", "max_in_flight": "32"}
    on_kafka = load_config(REPO / "deploy" / "job.kafka.example.toml")
    assert (
        on_kafka.source.format == "kafka"
        and on_kafka.source.envelope == "debezium"
        and on_kafka.table.ordering_field == "_event_position"
    )


def test_kafka_needs_its_brokers_and_topics():
    kafka = [*REQUIRED, "source.format=kafka", "source.schema=id BIGINT"]
    with pytest.raises(ConfigError, match="bootstrap_servers"):
        load_config(overrides=kafka)
    with pytest.raises(ConfigError, match=r"topics or source.kafka.topic_pattern"):
        load_config(overrides=[*kafka, "source.kafka.bootstrap_servers=b:9092"])
    with pytest.raises(ConfigError, match="avro_schema"):
        load_config(
            overrides=[
                *kafka,
                "source.kafka.bootstrap_servers=b:9092",
                'source.kafka.topics=["t"]',
                "source.value_format=avro",
            ]
        )
    debezium = load_config(
        overrides=[
            *kafka,
            "source.kafka.bootstrap_servers=b:9092",
            'source.kafka.topics=["t"]',
            "source.envelope=debezium",
        ]
    )
    assert debezium.table.ordering_field == "_event_position"


def test_storage_bounds_are_checked():
    with pytest.raises(ConfigError, match="max_in_flight"):
        load_config(overrides=[*REQUIRED, "storage.max_in_flight=0"])
    with pytest.raises(ConfigError, match="max_retries"):
        load_config(overrides=[*REQUIRED, "storage.max_retries=-1"])


def test_a_kafka_micro_batch_takes_what_the_driver_holds_unless_capped_otherwise():
    kafka = [
        *REQUIRED,
        "source.format=kafka",
        "source.schema=id BIGINT",
        "source.kafka.bootstrap_servers=127.0.0.1:9092",
        'source.kafka.topics=["t"]',
    ]
    assert load_config(overrides=kafka).kafka_offsets_per_trigger() == 64 * 2**20 // KAFKA_RECORD_BYTES
    assert (
        load_config(overrides=[*kafka, "write.driver_batch_bytes=1MiB"]).kafka_offsets_per_trigger()
        == 2**20 // KAFKA_RECORD_BYTES
    )
    assert (
        load_config(overrides=[*kafka, "source.kafka.max_offsets_per_trigger=500000"]).kafka_offsets_per_trigger()
        == 500_000
    )
    assert (
        load_config(overrides=[*kafka, "write.driver_batch_bytes=0"]).kafka_offsets_per_trigger() is None
    )  # Spark's tasks take it all


def test_driver_batch_bytes_takes_sizes_and_zero_but_not_negatives():
    write = load_config(overrides=REQUIRED).write
    assert write.driver_batch_bytes is None
    # unset: larger on a local master, whose machine runs Spark's tasks too
    assert (write.driver_limit(local=True), write.driver_limit(local=False)) == (256 * 2**20, 64 * 2**20)
    assert load_config(overrides=[*REQUIRED, "write.driver_batch_bytes=0"]).write.driver_limit(local=True) == 0
    assert load_config(overrides=[*REQUIRED, "write.driver_batch_bytes=16MiB"]).write.driver_batch_bytes == 16 * 2**20
    assert load_config(overrides=[*REQUIRED, "write.driver_batch_bytes=0"]).write.driver_batch_bytes == 0
    with pytest.raises(ConfigError, match="driver_batch_bytes"):
        load_config(overrides=[*REQUIRED, "write.driver_batch_bytes=-1"])


def test_the_clis_demo_defaults_leave_a_change_feeds_ordering_to_the_envelope():
    """`laketide run --conf source.envelope=debezium ...` without a config file: the demo's `ts` ordering field is
    the generator's, and the change feed orders by its position."""
    from laketide.cli.jobs import embedded_defaults
    from laketide.config import load_config

    overrides = [
        "source.format=kafka",
        "source.envelope=debezium",
        "source.kafka.bootstrap_servers=127.0.0.1:9092",
        'source.kafka.topics=["t"]',
    ]
    assert load_config(None, overrides, base=embedded_defaults(overrides)).table.ordering_field == "_event_position"
    assert load_config(None, [], base=embedded_defaults([])).table.ordering_field == "ts"


def test_a_change_feed_into_a_partitioned_table_has_a_global_index_and_refuses_a_per_partition_one():
    from laketide.config import ConfigError, load_config

    base = {
        "table": {"path": "/t", "record_key": ["id"], "partition_by": ["region"]},
        "source": {
            "format": "kafka",
            "envelope": "debezium",
            "kafka": {"bootstrap_servers": "b:9092", "topics": ["t"]},
        },
    }
    config = load_config(None, [], base=base)
    assert config.global_index(partitioned=True) and not config.global_index(partitioned=False)
    with pytest.raises(ConfigError, match=r"index.global = false"):
        load_config(None, ["index.global=false"], base=base)


def test_change_events_come_from_kafka_or_json_lines_and_may_leave_the_schema_out():
    base = {
        "table": {"path": "/t", "record_key": ["id"]},
        "source": {"format": "json", "path": "/landing", "envelope": "debezium"},
    }
    assert load_config(None, [], base=base).source.schema_ddl is None
    avro = [
        "source.format=kafka",
        "source.kafka.bootstrap_servers=b:9092",
        'source.kafka.topics=["t"]',
        "source.value_format=avro",
        "source.avro_schema=/t.avsc",
    ]
    assert load_config(None, avro, base=base).source.schema_ddl is None
    for landing in ("csv", "parquet"):
        with pytest.raises(ConfigError, match=r"set source.format = 'json'"):
            load_config(None, [f"source.format={landing}"], base=base)


def test_the_clis_demo_table_settings_stay_off_a_table_the_user_names():
    """`laketide run --conf table.path=...`: the demo's name, key and partitioning are not given to the user's table
    (an existing one has its own, a new one needs table.record_key)."""
    from laketide.cli.jobs import embedded_defaults

    overrides = ["table.path=/lake/orders", "source.format=json", "source.path=/landing", "source.schema=id BIGINT"]
    config = load_config(None, overrides, base=embedded_defaults(overrides))
    assert config.table.record_key is None and config.table.partition_by is None and config.table.name is None
    assert load_config(None, [], base=embedded_defaults([])).table.record_key == ["id"]
