"""Dates and times of timestamp columns in UTC, whatever the session time zone is.

Spark renders timestamps (``date_format``, ``to_date``, casts to string) in ``spark.sql.session.timeZone``,
so the same record would land in another date partition, or name another minute, depending on the session.
These expressions work on the instant itself (microseconds since the epoch), which has no time zone.
"""

from __future__ import annotations

from typing import Any

MICROS_PER_DAY = 86_400_000_000
MICROS_PER_SECOND = 1_000_000


def _floor_div(col: Any, divisor: int) -> Any:
    """``floor(col / divisor)``, also for negative values (instants before 1970). The dividend is an exact
    multiple of the divisor, so the quotient is exact while it is below 2**53 (microseconds: until 2255)."""
    from pyspark.sql import functions as F

    return ((col - F.pmod(col, F.lit(divisor))) / divisor).cast("long")


def utc_date(ts: Any) -> Any:
    """The UTC date of a timestamp column, as a ``yyyy-MM-dd`` string."""
    from pyspark.sql import functions as F

    days = _floor_div(F.unix_micros(ts), MICROS_PER_DAY).cast("int")
    return F.date_from_unix_date(days).cast("string")


def utc_iso_seconds(ts: Any) -> Any:
    """A timestamp column as a ``yyyy-MM-ddTHH:mm:ssZ`` string in UTC."""
    from pyspark.sql import functions as F

    micros = F.unix_micros(ts)
    second = _floor_div(F.pmod(micros, F.lit(MICROS_PER_DAY)), MICROS_PER_SECOND).cast("int")
    return F.format_string(
        "%sT%02d:%02d:%02dZ",
        utc_date(ts),
        _floor_div(second, 3600).cast("int"),
        _floor_div(F.pmod(second, F.lit(3600)), 60).cast("int"),
        F.pmod(second, F.lit(60)),
    )


__all__ = ["utc_date", "utc_iso_seconds"]
