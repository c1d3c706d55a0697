"""Spark finds Python data sources in top-level modules named ``pyspark_<name>`` exposing ``DefaultSource``:
with Rill installed, ``spark.read.format("rill")`` needs no registration."""

from rill.spark.source import RillDataSource as DefaultSource

__all__ = ["DefaultSource"]
