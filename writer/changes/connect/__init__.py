"""Kafka Connect's values: its schemas, logical types and Avro, decoded into Arrow."""
