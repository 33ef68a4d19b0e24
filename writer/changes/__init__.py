"""Change feeds into rows: Debezium's events (JSON, Avro through a schema registry, with or without schemas), Kafka
Connect's values, routing a database's topics to their tables, and the tally of what the events held besides. Nothing
here knows the micro-batch core: the decoder hands rows on, and its caller makes the batch."""
