"""Hudi's data files as a writer makes them: base files (parquet), log files (Avro or parquet blocks), the bucket
writer both take a file group's records from, and the files a commit stores."""
