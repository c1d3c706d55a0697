"""Spark sessions for Rill's jobs and tests: Python workers use this interpreter, and local runs get
settings that start fast on a small machine."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

LOCAL_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
}


def worker_env() -> dict[str, str]:
    """Environment variables that make Spark's Python workers run this interpreter."""
    return {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}


def build_session(master: str, app: str, conf: Mapping[str, str] | None = None) -> Any:
    from pyspark.sql import SparkSession

    os.environ.update(worker_env())
    builder = SparkSession.builder.master(master).appName(app).config("spark.sql.session.timeZone", "UTC")
    settings = dict(LOCAL_CONF) if master.startswith("local") else {}
    settings.update(conf or {})
    for k, v in settings.items():
        builder = builder.config(k, v)
    return builder.getOrCreate()
