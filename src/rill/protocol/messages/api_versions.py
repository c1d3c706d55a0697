"""ApiVersions (18) and SaslHandshake (17): the connection handshake."""

from __future__ import annotations

from rill.protocol.schema import field, message

API_VERSIONS_REQUEST = message("ApiVersionsRequest", 18, "0-4", "3+", [
    field("ClientSoftwareName", "string", "3+"),
    field("ClientSoftwareVersion", "string", "3+"),
])


API_VERSIONS_RESPONSE = message("ApiVersionsResponse", 18, "0-4", "3+", [
    field("ErrorCode", "int16", "0+"),
    field("ApiKeys", "[]ApiVersion", "0+", fields=[
        field("ApiKey", "int16", "0+"),
        field("MinVersion", "int16", "0+"),
        field("MaxVersion", "int16", "0+"),
    ]),
    field("ThrottleTimeMs", "int32", "1+"),
    field("SupportedFeatures", "[]SupportedFeatureKey", "3+", tag=0, fields=[
        field("Name", "string", "3+"),
        field("MinVersion", "int16", "3+"),
        field("MaxVersion", "int16", "3+"),
    ]),
    field("FinalizedFeaturesEpoch", "int64", "3+", tag=1, default=-1),
    field("FinalizedFeatures", "[]FinalizedFeatureKey", "3+", tag=2, fields=[
        field("Name", "string", "3+"),
        field("MaxVersionLevel", "int16", "3+"),
        field("MinVersionLevel", "int16", "3+"),
    ]),
    field("ZkMigrationReady", "bool", "3+", tag=3, default=False),
])


SASL_HANDSHAKE_REQUEST = message("SaslHandshakeRequest", 17, "0-1", "none", [
    field("Mechanism", "string", "0+"),
])


SASL_HANDSHAKE_RESPONSE = message("SaslHandshakeResponse", 17, "0-1", "none", [
    field("ErrorCode", "int16", "0+"),
    field("Mechanisms", "[]string", "0+"),
])

APIS = [
    (API_VERSIONS_REQUEST, API_VERSIONS_RESPONSE),
    (SASL_HANDSHAKE_REQUEST, SASL_HANDSHAKE_RESPONSE),
]
