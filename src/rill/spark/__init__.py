"""Rill's data pipeline on Apache Spark: the ``rill`` data source, the offline loader and the audit."""
