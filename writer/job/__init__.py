"""A writer's life around the micro-batch core: the session that opens a table and takes its lease, the running
writer, a whole database's tables, an operator's changes, the table services and the compactor, the job's health
and its last word, and ``laketide.write``."""
