"""The option names the ``rill`` data source takes, and the refusal of every other one.

Spark hands options over lowercased, so names are compared case-insensitively and messages give them in
their documented spelling. An unknown name (a typo such as ``startingOffset``) is refused with the nearest
known name; options of Spark's Kafka source that Rill cannot honour are refused with the reason, as are
``kafka.*`` client options the Rill client does not implement. The TLS and SASL options (``kafka.security.protocol``,
``kafka.sasl.*``, ``kafka.ssl.*``: PEM stores, PLAIN and SCRAM) are Kafka's client settings behind the ``kafka.``
prefix, read by ``rill.client.security`` (which refuses JKS/PKCS12 stores, GSSAPI and OAUTHBEARER by name).
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from rill.client.security import ClientSecurity

log = logging.getLogger(__name__)

Mode = Literal["read", "write"]
_ING: dict[str, str] = {"read": "reading", "write": "writing"}
_OTHER: dict[str, str] = {"read": "writing", "write": "reading"}

# Options of both directions: where the brokers are, and the client settings Rill's client honours.
COMMON = (
    "kafka.bootstrap.servers",
    "rill.bootstrap.servers",
    "kafka.client.id",
    "kafka.request.timeout.ms",
    "kafka.security.protocol",
    "kafka.sasl.mechanism",
    "kafka.sasl.jaas.config",
    "kafka.ssl.truststore.location",
    "kafka.ssl.truststore.type",
    "kafka.ssl.keystore.location",
    "kafka.ssl.keystore.type",
    "kafka.ssl.key.location",
    "kafka.ssl.key.password",
    "kafka.ssl.endpoint.identification.algorithm",
)
READ = (
    *COMMON,
    "subscribe",
    "subscribePattern",
    "assign",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "startingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "endingTimestamp",
    "endingOffsetsByTimestamp",
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "minPartitions",
    "maxRecordsPerPartition",
    "failOnDataLoss",
    "fetchOffset.numRetries",
    "fetchOffset.retryIntervalMs",
    "kafkaConsumer.pollTimeoutMs",
    "includeHeaders",
    "pushFilters",
    "groupIdPrefix",
    "kafka.group.id",
    # typed columns through a schema registry (rill.spark.typed)
    "schemaRegistryUrl",
    "valueFormat",
    "keyFormat",
    "valueSubject",
    "keySubject",
    "valueSchemaVersion",
    "keySchemaVersion",
    "decodeMode",
)
WRITE = (
    *COMMON,
    "topic",
    "compression.type",
    "kafka.compression.type",
    "kafka.acks",
    "checkpointLocation",  # Spark passes a streaming write's checkpoint location with the sink's options
    "exactlyOnce",
    "transactionalIdPrefix",
    "kafka.transaction.timeout.ms",
)
STREAM_ONLY = ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay")

_SECURITY_LIMITS = (
    "the rill client takes PEM trust and key stores and the SASL mechanisms PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512"
)

# Kafka client options Spark's Kafka source and sink refuse, with the reason.
REFUSED = {
    "kafka.auto.offset.reset": (
        "Kafka option auto.offset.reset is not supported: set the source option startingOffsets to earliest "
        "or latest (the query, not a consumer, tracks which offsets were read)"
    ),
    "kafka.key.deserializer": (
        "Kafka option key.deserializer is not supported: keys are read as bytes; convert them with DataFrame "
        "operations (CAST(key AS STRING))"
    ),
    "kafka.value.deserializer": (
        "Kafka option value.deserializer is not supported: values are read as bytes; convert them with "
        "DataFrame operations (CAST(value AS STRING), from_json)"
    ),
    "kafka.key.serializer": (
        "Kafka option key.serializer is not supported: the key column is written as bytes (string or binary)"
    ),
    "kafka.value.serializer": (
        "Kafka option value.serializer is not supported: the value column is written as bytes (string or binary)"
    ),
    "kafka.enable.auto.commit": (
        "Kafka option enable.auto.commit is not supported: the source commits no offsets (a stream's offsets "
        "live in its checkpoint)"
    ),
    "kafka.interceptor.classes": "Kafka option interceptor.classes is not supported",
}


def _by_lower(names: Iterable[str]) -> dict[str, str]:
    return {n.lower(): n for n in names}


def check_option_names(options: Mapping[str, str], mode: Mode) -> None:
    """Refuse any option ``mode`` does not take; ``options`` may come in any case (Spark lowercases them)."""
    from rill.spark.options import OptionError

    own = _by_lower(READ if mode == "read" else WRITE)
    other = _by_lower(WRITE if mode == "read" else READ)
    for raw_key in options:
        key = raw_key.lower()
        if key in own:
            continue
        if key in REFUSED:
            raise OptionError(REFUSED[key])
        if key.startswith(("kafka.ssl.", "kafka.sasl.")):
            raise OptionError(f"option {raw_key} is not supported: {_SECURITY_LIMITS}")
        if key in other:
            raise OptionError(
                f"option {other[key]} is for {_OTHER[mode]}; the rill source does not take it when {_ING[mode]}"
            )
        close = difflib.get_close_matches(key, list(own), n=1, cutoff=0.75)
        hint = f"; did you mean {own[close[0]]}?" if close else ""
        if key.startswith("kafka."):
            honoured = ", ".join(sorted(n for n in own.values() if n.startswith("kafka.")))
            raise OptionError(
                f"Kafka client option {raw_key} is not supported by the rill source{hint} (the Kafka client options "
                f"it honours when {_ING[mode]}: {honoured})"
            )
        if not hint:
            hint = " (options: " + ", ".join(sorted(own.values(), key=str.lower)) + ")"
        raise OptionError(f"unknown option {raw_key} for the rill source{hint}")
    if mode == "write":
        acks = options.get("kafka.acks")
        if acks is not None and acks.strip().lower() not in ("all", "-1"):
            raise OptionError(
                f"kafka.acks {acks} is not supported: the writer is an idempotent producer, which needs acks=all"
            )


def warn_stream_only(options: Mapping[str, str]) -> None:
    """Spark's Kafka source logs, and ignores, stream-only options in a batch query: so does this one."""
    for name in STREAM_ONLY:
        if name.lower() in options:
            log.warning("%s option ignored in batch queries", name)


def client_security(options: Mapping[str, str]) -> ClientSecurity | None:
    """The ``kafka.``-prefixed security options (lowercased names) as the client's settings; None when none
    is given. A setting the client cannot use is refused by its option name."""
    from rill.client.security import ClientSecurity, SecurityConfigError
    from rill.spark.options import OptionError

    props = {k[len("kafka.") :]: v for k, v in options.items() if k.startswith(("kafka.ssl.", "kafka.sasl."))}
    if "kafka.security.protocol" in options:
        props["security.protocol"] = options["kafka.security.protocol"]
    if not props:
        return None
    try:
        security = ClientSecurity.from_properties(props)
        if security.uses_tls:
            security.ssl_context()
    except SecurityConfigError as e:
        text = str(e)
        raise OptionError(f"kafka.{text}" if text.startswith(("ssl.", "sasl.", "security.")) else text) from None
    return security


def security_options(security: ClientSecurity | None) -> dict[str, str]:
    """The ``kafka.``-prefixed options that give the source and sink ``security`` (what ``client_security``
    reads back as the same settings); none for None. The credentials go in a ``sasl.jaas.config``."""
    from rill.security.jaas import PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE

    if security is None:
        return {}
    out = {"kafka.security.protocol": security.protocol}
    if security.uses_sasl and security.mechanism is not None:
        module = PLAIN_LOGIN_MODULE if security.mechanism == "PLAIN" else SCRAM_LOGIN_MODULE
        out["kafka.sasl.mechanism"] = security.mechanism
        out["kafka.sasl.jaas.config"] = (
            f'{module} required username="{_jaas_quoted(security.username)}" '
            f'password="{_jaas_quoted(security.password)}";'
        )
    if security.uses_tls:
        for name, value in (
            ("kafka.ssl.truststore.location", security.truststore),
            ("kafka.ssl.keystore.location", security.keystore),
            ("kafka.ssl.key.location", security.key_file),
            ("kafka.ssl.key.password", security.key_password),
        ):
            if value is not None:
                out[name] = value
        if not security.check_hostname:
            out["kafka.ssl.endpoint.identification.algorithm"] = ""
    return out


def _jaas_quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')
