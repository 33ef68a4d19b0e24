"""The one configuration model of a laketide job (``JobConfig``), loaded from TOML and ``--conf`` overrides, and
its sections: the job's own (``config.job``), the sources (``config.source``), the table services
(``config.services``), the catalog the table is registered in (``config.catalog``), the tables of a whole
database (``config.tables``; their routes, over the whole model, in ``config.routes``), the value types
(``config.types``); the reference the docs show is made from it (``config.reference``)."""

from laketide.config.catalog import CatalogSection
from laketide.config.job import (
    DRIVER_BATCH_BYTES,
    KAFKA_RECORD_BYTES,
    LOCAL_DRIVER_BATCH_BYTES,
    ConfigError,
    CoordinatorSection,
    IndexSection,
    JobConfig,
    SparkSection,
    StorageSection,
    StreamSection,
    TableSection,
    WriteSection,
    apply_override,
    load_config,
)
from laketide.config.section import Section
from laketide.config.services import ArchiveSection, CleanSection, CompactionSection, MirrorSection, ServicesSection
from laketide.config.source import (
    DebeziumSection,
    GeneratorSection,
    KafkaSection,
    SchemaRegistrySection,
    SourceSection,
)
from laketide.config.tables import DatabaseSection, TableKeys, TableOverride

__all__ = [
    "DRIVER_BATCH_BYTES",
    "KAFKA_RECORD_BYTES",
    "LOCAL_DRIVER_BATCH_BYTES",
    "ArchiveSection",
    "CatalogSection",
    "CleanSection",
    "CompactionSection",
    "ConfigError",
    "CoordinatorSection",
    "DatabaseSection",
    "DebeziumSection",
    "GeneratorSection",
    "IndexSection",
    "JobConfig",
    "KafkaSection",
    "MirrorSection",
    "SchemaRegistrySection",
    "Section",
    "ServicesSection",
    "SourceSection",
    "SparkSection",
    "StorageSection",
    "StreamSection",
    "TableKeys",
    "TableOverride",
    "TableSection",
    "WriteSection",
    "apply_override",
    "load_config",
]
