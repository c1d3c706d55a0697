"""The client quota admin APIs (KIP-546): DescribeClientQuotas (48), AlterClientQuotas (49)."""

from __future__ import annotations

from rill.protocol.schema import field, message

_ENTITY = [
    field("EntityType", "string", "0+"),
    field("EntityName", "string", "0+", nullable="0+"),
]

DESCRIBE_CLIENT_QUOTAS_REQUEST = message(
    "DescribeClientQuotasRequest",
    48,
    "0-1",
    "1+",
    [
        field(
            "Components",
            "[]ComponentData",
            "0+",
            fields=[
                field("EntityType", "string", "0+"),
                field("MatchType", "int8", "0+"),
                field("Match", "string", "0+", nullable="0+"),
            ],
        ),
        field("Strict", "bool", "0+"),
    ],
)

DESCRIBE_CLIENT_QUOTAS_RESPONSE = message(
    "DescribeClientQuotasResponse",
    48,
    "0-1",
    "1+",
    [
        field("ThrottleTimeMs", "int32", "0+"),
        field("ErrorCode", "int16", "0+"),
        field("ErrorMessage", "string", "0+", nullable="0+"),
        field(
            "Entries",
            "[]EntryData",
            "0+",
            nullable="0+",
            fields=[
                field("Entity", "[]EntityData", "0+", fields=list(_ENTITY)),
                field(
                    "Values",
                    "[]ValueData",
                    "0+",
                    fields=[
                        field("Key", "string", "0+"),
                        field("Value", "float64", "0+"),
                    ],
                ),
            ],
        ),
    ],
)

ALTER_CLIENT_QUOTAS_REQUEST = message(
    "AlterClientQuotasRequest",
    49,
    "0-1",
    "1+",
    [
        field(
            "Entries",
            "[]EntryData",
            "0+",
            fields=[
                field("Entity", "[]EntityData", "0+", fields=list(_ENTITY)),
                field(
                    "Ops",
                    "[]OpData",
                    "0+",
                    fields=[
                        field("Key", "string", "0+"),
                        field("Value", "float64", "0+"),
                        field("Remove", "bool", "0+"),
                    ],
                ),
            ],
        ),
        field("ValidateOnly", "bool", "0+"),
    ],
)

ALTER_CLIENT_QUOTAS_RESPONSE = message(
    "AlterClientQuotasResponse",
    49,
    "0-1",
    "1+",
    [
        field("ThrottleTimeMs", "int32", "0+"),
        field(
            "Entries",
            "[]EntryData",
            "0+",
            fields=[
                field("ErrorCode", "int16", "0+"),
                field("ErrorMessage", "string", "0+", nullable="0+"),
                field("Entity", "[]EntityData", "0+", fields=list(_ENTITY)),
            ],
        ),
    ],
)

APIS = [
    (DESCRIBE_CLIENT_QUOTAS_REQUEST, DESCRIBE_CLIENT_QUOTAS_RESPONSE),
    (ALTER_CLIENT_QUOTAS_REQUEST, ALTER_CLIENT_QUOTAS_RESPONSE),
]
