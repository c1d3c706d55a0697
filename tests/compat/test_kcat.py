"""Debian's kcat (librdkafka 2.0.2) against a Rill broker."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from tests.compat._data import CODECS, N_RECORDS, make_records

KCAT = shutil.which("kcat") or shutil.which("kafkacat")


@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume_every_codec(rill_broker, codec: str, tmp_path) -> None:
    assert KCAT is not None, "kcat is not installed (the README's test command installs it)"
    bootstrap = rill_broker.bootstrap_servers
    topic = f"kcat-{codec}"
    records = make_records(seed="kcat" + codec)
    # kcat reads one record per line: key and value split by a tab (values are printable ASCII).
    data = b"".join(r.key + b"\t" + r.value + b"\n" for r in records)
    produce = subprocess.run(
        [
            KCAT,
            "-b",
            bootstrap,
            "-P",
            "-t",
            topic,
            "-p",
            "0",
            "-K",
            "\t",
            "-z",
            codec,
            "-H",
            "h1=fixed",
            "-X",
            "enable.idempotence=true",
        ],
        input=data,
        capture_output=True,
        timeout=120,
    )
    assert produce.returncode == 0, produce.stderr.decode()
    consume = subprocess.run(
        [
            KCAT,
            "-b",
            bootstrap,
            "-C",
            "-t",
            topic,
            "-p",
            "0",
            "-o",
            "beginning",
            "-e",
            "-q",
            "-f",
            "%o\t%k\t%s\t%h\n",
        ],
        capture_output=True,
        timeout=120,
    )
    assert consume.returncode == 0, consume.stderr.decode()
    lines = consume.stdout.split(b"\n")[:-1]
    assert len(lines) == N_RECORDS
    for i, (line, r) in enumerate(zip(lines, records, strict=True)):
        offset, key, value, headers = line.split(b"\t")
        assert (int(offset), key, value, headers) == (i, r.key, r.value, b"h1=fixed")
