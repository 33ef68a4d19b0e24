"""Run as a script: what Spark makes of a Hive Metastore's entries, printed as JSON. ``argv``: the metastore's
uri, a warehouse folder, the database. Spark's own ``HiveExternalCatalog`` reads each entry as Spark SQL
resolves a table by name: the provider, schema and partition columns from the data-source properties, the
location, and the partitions. (``DESCRIBE`` would go on to load the provider, ``hudi``, which is Hudi's Spark
bundle's: a jar from Maven, not here.)"""

from __future__ import annotations

import json
import sys

from pyspark.sql import SparkSession


def main(uri: str, warehouse: str, database: str) -> None:
    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.sql.catalogImplementation", "hive")
        .config("spark.hadoop.hive.metastore.uris", uri)
        .config("spark.sql.warehouse.dir", warehouse)
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    catalog = spark._jsparkSession.sharedState().externalCatalog()  # type: ignore[union-attr]
    found = {}
    for name in sorted(catalog.listTables(database).mkString("\n").split("\n")):
        table = catalog.getTable(database, name)
        partitions = catalog.listPartitions(database, name, spark._jvm.scala.Option.empty())  # type: ignore[union-attr]
        it, listed = partitions.iterator(), []
        while it.hasNext():
            p = it.next()
            listed.append([json.loads(_map_json(p.spec())), p.location().toString()])
        found[name] = {
            "provider": table.provider().get(),
            "type": table.tableType().name(),
            "schema": json.loads(table.schema().json()),
            "partition_columns": table.partitionColumnNames().mkString("\n").split("\n"),
            "location": table.storage().locationUri().get().toString(),
            "input_format": table.storage().inputFormat().get(),
            "partitions": listed,
        }
    print(json.dumps(found))
    spark.stop()


def _map_json(spec) -> str:
    it, out = spec.iterator(), {}
    while it.hasNext():
        pair = it.next()
        out[pair._1()] = pair._2()
    return json.dumps(out)


if __name__ == "__main__":
    main(*sys.argv[1:4])
