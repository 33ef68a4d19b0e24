"""The Delta mirror: a Delta Lake log over the Hudi table's own parquet files, so that Delta readers (delta-rs) read
what the Hudi timeline completed. Built on the format and the storage seam."""
