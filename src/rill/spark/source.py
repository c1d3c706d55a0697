"""The ``rill`` data source for PySpark (Python Data Source API).

``spark.read.format("rill")``, ``spark.readStream.format("rill")``, ``df.write.format("rill")`` and
``df.writeStream.format("rill")`` work without registration once Rill is installed: Spark loads the top-level
module ``pyspark_rill``, whose ``DefaultSource`` is this class. Options are those of Spark's Kafka source
(see ``rill.spark.options``); any other option is refused with the nearest known name
(``rill.spark.option_names``).
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from rill.spark.arrow import schema_ddl
from rill.spark.option_names import warn_stream_only
from rill.spark.options import SourceOptions, include_headers
from rill.spark.reader import RillBatchReader, RillFilteringBatchReader
from rill.spark.stream_reader import RillStreamReader
from rill.spark.writer import RillStreamWriter, RillWriter, check_save_mode


class RillDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "rill"

    def schema(self) -> str:
        # The options are checked by reader() / streamReader(), which know the direction.
        return schema_ddl(include_headers(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = SourceOptions.parse(self.options)
        warn_stream_only({k.lower(): v for k, v in self.options.items()})
        return RillFilteringBatchReader(opts) if opts.push_filters else RillBatchReader(opts)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return RillStreamReader(SourceOptions.parse(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> RillWriter:
        check_save_mode(overwrite)
        return RillWriter(SourceOptions.parse(self.options, for_write=True), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> RillStreamWriter:
        return RillStreamWriter(SourceOptions.parse(self.options, for_write=True), schema)
