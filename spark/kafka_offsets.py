"""What the checkpoint and the brokers tell of a Kafka query's micro-batches: the lag after each, and how
many records the first spans (whose start the checkpoint does not log)."""

from __future__ import annotations

import logging

from laketide.config import JobConfig
from laketide.spark.change_feed import kafka_client
from laketide.writer.landing import source_offsets

log = logging.getLogger("laketide.job")


class KafkaOffsets:
    """A Kafka query's offsets; the brokers' client is made at the first question. Used by the micro-batch thread."""

    def __init__(self, config: JobConfig):
        self.config = config
        self._brokers = None

    def lag(self, batch_id: int) -> dict[str, int]:
        """Per ``topic/partition``, the brokers' newest offset minus the micro-batch's end: 0 once it caught up.
        Only for reporting: a failure to ask is logged, and the lag left out (empty)."""
        try:
            end, marks = self._end_and_watermarks(batch_id)
            return {f"{t}/{p}": max(0, marks[(t, int(p))][1] - int(o)) for t, parts in end.items() for p, o in parts.items()}
        except Exception:
            log.warning("micro-batch %s: the Kafka lag could not be read", batch_id, exc_info=True)
            return {}

    def first_records(self, batch_id: int) -> int | None:
        """At most how many offsets the query's first Kafka micro-batch spans, whose start the checkpoint does not
        log: ``max_offsets_per_trigger`` (the cap gives each partition with a backlog at least one, so a few more at
        most), else its end offsets less the brokers' earliest. Without it the first micro-batch of every new job
        went to Spark's tasks, a few seconds more however few its records. ``None`` when unknown."""
        cap = self.config.source.kafka.max_offsets_per_trigger
        if cap:
            return cap
        try:
            end, marks = self._end_and_watermarks(batch_id)
        except Exception:
            log.warning("micro-batch %s: the brokers' earliest offsets could not be read", batch_id, exc_info=True)
            return None
        return sum(max(0, int(o) - marks[(t, int(p))][0]) for t, parts in end.items() for p, o in parts.items()) if end else None

    def _end_and_watermarks(self, batch_id: int) -> tuple[dict, dict[tuple[str, int], tuple[int, int]]]:
        """The micro-batch's end offsets (from the checkpoint) and the brokers' (earliest, newest) of each partition."""
        from laketide.spark.kafka_source import Brokers

        end = source_offsets(self.config.stream.checkpoint, batch_id, self.config.storage.io_options) or {}
        if self._brokers is None:
            self._brokers = Brokers(kafka_client(self.config.source.kafka))
        return end, self._brokers.watermarks([(t, int(p)) for t, parts in end.items() for p in parts])

    def close(self) -> None:
        if self._brokers is not None:
            self._brokers.close()
