"""The Spark adapter: the streaming job, its session, the tasks path, sources, the stage clock and the laketide Spark
source.

The only folder that imports pyspark; everything it drives is Spark-free (``writer/``, ``coordinator/``, ``index/``,
``table/``)."""
