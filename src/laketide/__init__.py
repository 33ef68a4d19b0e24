"""laketide: a streaming upsert writer for Apache Hudi tables."""

__version__ = "0.1.0"
