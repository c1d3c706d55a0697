"""``rill pipeline --command-config``: a file the client cannot use is refused in one line before Spark or a
broker is involved; the settings it holds become ``kafka.``-prefixed options that the rill source and sink
read back as the same settings."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.integration.security._pki import make_pki
from tests.unit.cli.test_cli_errors import one_line_error

from rill.client.security import ClientSecurity
from rill.spark.option_names import check_option_names, client_security, security_options

pytestmark = pytest.mark.timeout(120)

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


def _pipeline(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rill", "pipeline", *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_bad_command_config_is_refused_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "warehouse"
    # port 1: nothing listens there; the file is refused before any connection (and before Spark starts)
    load = ["load", "--bootstrap-server", "127.0.0.1:1", "--topics", "t", "--output", str(out)]
    audit = ["audit", "--bootstrap-server", "127.0.0.1:1", "--output", str(tmp_path)]
    feed = ["feed", "--bootstrap-server", "127.0.0.1:1", "--source", "a", "--target", "b", "--checkpoint", "c"]

    missing = tmp_path / "missing.properties"
    line = one_line_error(_pipeline(*load, "--command-config", str(missing)), 1)
    assert line == f"error: cannot read {missing}: No such file or directory"
    assert not out.exists()  # the loader did not start

    gssapi = tmp_path / "gssapi.properties"
    gssapi.write_text("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n")
    for command in (load, audit, feed):
        line = one_line_error(_pipeline(*command, "--command-config", str(gssapi)), 1)
        assert line.startswith(f"error: {gssapi}: sasl.mechanism GSSAPI is not supported"), line

    jks = tmp_path / "jks.properties"
    jks.write_text("security.protocol=SSL\nssl.truststore.type=JKS\nssl.truststore.location=/x.jks\n")
    line = one_line_error(_pipeline(*audit, "--command-config", str(jks)), 1)
    assert "ssl.truststore.type JKS is not supported" in line

    no_store = tmp_path / "no-store.properties"
    no_store.write_text(f"security.protocol=SSL\nssl.truststore.location={tmp_path / 'ca.pem'}\n")
    line = one_line_error(_pipeline(*load, "--command-config", str(no_store)), 1)
    assert line.startswith(f"error: {no_store}: cannot set up TLS"), line

    unknown = tmp_path / "unknown.properties"
    unknown.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.login.class=x.Y\n")
    line = one_line_error(_pipeline(*feed, "--command-config", str(unknown)), 1)
    assert line == f"error: {unknown}: sasl.login.class is not supported by rill's client"

    # the option itself needs its FILE: a usage error
    assert "--command-config" in one_line_error(_pipeline(*load, "--command-config"), 2)


def test_security_options_give_the_source_the_same_settings(tmp_path: Path) -> None:
    cases = [
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.jaas.config": f'{SCRAM} required username="etl" password="p\\"w\\\\d;x=1";',
        },
        {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN", "sasl.username": "u", "sasl.password": "p"},
        {"security.protocol": "PLAINTEXT"},
    ]
    if shutil.which("openssl") is not None:
        pki = make_pki(tmp_path)
        cases.append(
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.jaas.config": f'{SCRAM} required username="etl" password="s";',
                "ssl.ca.location": str(pki.ca),
                "ssl.certificate.location": str(pki.client_cert),
                "ssl.key.location": str(pki.client_key),
                "ssl.endpoint.identification.algorithm": "",
            }
        )
    for props in cases:
        security = ClientSecurity.from_properties(props)
        options = {k.lower(): v for k, v in security_options(security).items()}  # as Spark hands them over
        check_option_names(options, "read")
        check_option_names(options, "write")
        assert client_security(options) == security, props
    assert security_options(None) == {}
