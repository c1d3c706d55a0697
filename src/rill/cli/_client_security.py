"""Client security settings of the CLI tools: a ``--command-config`` file may be written for Kafka's Java tools
(``security.protocol``, ``sasl.mechanism``, ``sasl.jaas.config``, PEM ``ssl.truststore.location`` /
``ssl.keystore.location``); the names librdkafka does not know are turned into its own here, so the same
client.properties works with ``rill`` and with kafka-configs.sh. The tools that speak the protocol with
``rill.client`` (transactions, client quotas, delete-offsets) read the same file as a ``ClientSecurity``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rill.cli._common import CliError
from rill.security.jaas import parse_jaas_config

if TYPE_CHECKING:
    from rill.client.security import ClientSecurity

_DROPPED = ("ssl.truststore.type", "ssl.keystore.type", "ssl.truststore.password", "ssl.keystore.password")


def librdkafka_security(props: dict[str, Any]) -> dict[str, Any]:
    out = dict(props)
    jaas = out.pop("sasl.jaas.config", None)
    if jaas:
        try:
            modules = parse_jaas_config(str(jaas))
        except ValueError as e:
            raise CliError(f"sasl.jaas.config: {e}") from None
        options = next((m.options for m in modules if "username" in m.options), {})
        out.setdefault("sasl.username", options.get("username", ""))
        out.setdefault("sasl.password", options.get("password", ""))
    if "sasl.mechanism" in out:
        out.setdefault("sasl.mechanisms", out.pop("sasl.mechanism"))
    truststore = out.pop("ssl.truststore.location", None)
    if truststore:
        out.setdefault("ssl.ca.location", truststore)
    keystore = out.pop("ssl.keystore.location", None)
    if keystore:  # one PEM file with the certificate chain and the key
        out.setdefault("ssl.certificate.location", keystore)
        out.setdefault("ssl.key.location", keystore)
    if out.get("ssl.endpoint.identification.algorithm") == "":
        out["ssl.endpoint.identification.algorithm"] = "none"
    for name in _DROPPED:
        out.pop(name, None)
    return out


def rill_client_security(command_config: str | None) -> ClientSecurity | None:
    """The ``--command-config`` file as ``rill.client`` settings (None without one); TLS files are read now,
    so a wrong path or a JKS store is reported before any connection."""
    if not command_config:
        return None
    from rill.cli._common import read_properties_file
    from rill.client.security import ClientSecurity, SecurityConfigError

    try:
        security = ClientSecurity.from_properties(read_properties_file(command_config))
        if security.uses_tls:
            security.ssl_context()
    except SecurityConfigError as e:
        raise CliError(f"{command_config}: {e}") from None
    return security
