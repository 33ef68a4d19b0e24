"""Apache Hudi's on-disk format (table version 6): properties, instants and the timeline, file names, commit and
Avro metadata, schemas, key generators, log files, markers, the file-system view, and the timeline files of each
table service's action. Built on the storage seam alone."""
