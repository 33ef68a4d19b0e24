"""laketide's own Kafka reader for Spark: the brokers asked for offsets, a micro-batch's records read by a
consumer on the driver or in Spark's tasks, the offsets a query keeps, and the Spark data source they make."""
