"""The ``rill`` data source for PySpark (Python Data Source API).

``spark.read.format("rill")``, ``spark.readStream.format("rill")``, ``df.write.format("rill")`` and
``df.writeStream.format("rill")`` work without registration once Rill is installed: Spark loads the top-level
module ``pyspark_rill``, whose ``DefaultSource`` is this class. Options are those of Spark's Kafka source
(see ``rill.spark.options``); any other option is refused with the nearest known name
(``rill.spark.option_names``).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from rill.spark.arrow import schema_ddl
from rill.spark.option_names import warn_stream_only
from rill.spark.options import OptionError, SourceOptions, include_headers
from rill.spark.reader import RillBatchReader, RillFilteringBatchReader
from rill.spark.stream_reader import RillStreamReader
from rill.spark.typed import TypedError, base_spark_schema, parse_typed, spark_schema
from rill.spark.writer import RillStreamWriter, RillWriter, check_save_mode


class RillDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "rill"

    def schema(self) -> Any:
        # The options are checked by reader() / streamReader(), which know the direction; typed columns
        # (valueFormat / keyFormat=avro) take their types from the registry, so those options are read here.
        try:
            typed = parse_typed({k.lower(): v for k, v in self.options.items()})
        except TypedError as e:
            raise OptionError(str(e)) from None
        if typed is None:
            return schema_ddl(include_headers(self.options))
        return _typed_schema(SourceOptions.parse(self.options).resolve_typed())

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = SourceOptions.parse(self.options)
        warn_stream_only({k.lower(): v for k, v in self.options.items()})
        reader = RillFilteringBatchReader(opts) if opts.push_filters else RillBatchReader(opts)
        _check_schema(reader.opts, schema)
        return reader

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return RillStreamReader(SourceOptions.parse(self.options), lambda opts: _check_schema(opts, schema))

    def writer(self, schema: StructType, overwrite: bool) -> RillWriter:
        check_save_mode(overwrite)
        return RillWriter(SourceOptions.parse(self.options, for_write=True), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> RillStreamWriter:
        return RillStreamWriter(SourceOptions.parse(self.options, for_write=True), schema)


def _typed_schema(opts: SourceOptions) -> Any:
    assert opts.typed is not None
    return spark_schema(base_spark_schema(opts.include_headers), opts.typed)


def _check_schema(opts: SourceOptions, schema: StructType) -> None:
    """The reader schema fetched for the reader must be the one Spark planned with (a version registered in
    between would change the columns' types under the query; a schema the user gives is refused unless it is
    exactly the typed one)."""
    if opts.typed is None:
        return
    expected = _typed_schema(opts)
    if expected != schema:
        subjects = ", ".join(
            f"{c.reader.subject} version {c.reader.version}"
            for c in (opts.typed.key, opts.typed.value)
            if c is not None and c.reader is not None
        )
        raise OptionError(
            f"the query's schema is not the typed schema of {subjects} (a version was registered while the "
            "query was planned, or a schema was given with .schema()): run the query again, or pin "
            "valueSchemaVersion / keySchemaVersion"
        )
