"""SaslAuthenticate (36) and the SCRAM credential admin APIs: DescribeUserScramCredentials (50),
AlterUserScramCredentials (51). (SaslHandshake is declared with ApiVersions.)"""

from __future__ import annotations

from rill.protocol.schema import field, message

SASL_AUTHENTICATE_REQUEST = message(
    "SaslAuthenticateRequest",
    36,
    "0-2",
    "2+",
    [
        field("AuthBytes", "bytes", "0+"),
    ],
)

SASL_AUTHENTICATE_RESPONSE = message(
    "SaslAuthenticateResponse",
    36,
    "0-2",
    "2+",
    [
        field("ErrorCode", "int16", "0+"),
        field("ErrorMessage", "string", "0+", nullable="0+"),
        field("AuthBytes", "bytes", "0+"),
        field("SessionLifetimeMs", "int64", "1+", default=0),
    ],
)

DESCRIBE_USER_SCRAM_CREDENTIALS_REQUEST = message(
    "DescribeUserScramCredentialsRequest",
    50,
    "0",
    "0+",
    [
        field(
            "Users",
            "[]UserName",
            "0+",
            nullable="0+",
            fields=[
                field("Name", "string", "0+"),
            ],
        ),
    ],
)

DESCRIBE_USER_SCRAM_CREDENTIALS_RESPONSE = message(
    "DescribeUserScramCredentialsResponse",
    50,
    "0",
    "0+",
    [
        field("ThrottleTimeMs", "int32", "0+"),
        field("ErrorCode", "int16", "0+"),
        field("ErrorMessage", "string", "0+", nullable="0+"),
        field(
            "Results",
            "[]DescribeUserScramCredentialsResult",
            "0+",
            fields=[
                field("User", "string", "0+"),
                field("ErrorCode", "int16", "0+"),
                field("ErrorMessage", "string", "0+", nullable="0+"),
                field(
                    "CredentialInfos",
                    "[]CredentialInfo",
                    "0+",
                    fields=[
                        field("Mechanism", "int8", "0+"),
                        field("Iterations", "int32", "0+"),
                    ],
                ),
            ],
        ),
    ],
)

ALTER_USER_SCRAM_CREDENTIALS_REQUEST = message(
    "AlterUserScramCredentialsRequest",
    51,
    "0",
    "0+",
    [
        field(
            "Deletions",
            "[]ScramCredentialDeletion",
            "0+",
            fields=[
                field("Name", "string", "0+"),
                field("Mechanism", "int8", "0+"),
            ],
        ),
        field(
            "Upsertions",
            "[]ScramCredentialUpsertion",
            "0+",
            fields=[
                field("Name", "string", "0+"),
                field("Mechanism", "int8", "0+"),
                field("Iterations", "int32", "0+"),
                field("Salt", "bytes", "0+"),
                field("SaltedPassword", "bytes", "0+"),
            ],
        ),
    ],
)

ALTER_USER_SCRAM_CREDENTIALS_RESPONSE = message(
    "AlterUserScramCredentialsResponse",
    51,
    "0",
    "0+",
    [
        field("ThrottleTimeMs", "int32", "0+"),
        field(
            "Results",
            "[]AlterUserScramCredentialsResult",
            "0+",
            fields=[
                field("User", "string", "0+"),
                field("ErrorCode", "int16", "0+"),
                field("ErrorMessage", "string", "0+", nullable="0+"),
            ],
        ),
    ],
)

APIS = [
    (SASL_AUTHENTICATE_REQUEST, SASL_AUTHENTICATE_RESPONSE),
    (DESCRIBE_USER_SCRAM_CREDENTIALS_REQUEST, DESCRIBE_USER_SCRAM_CREDENTIALS_RESPONSE),
    (ALTER_USER_SCRAM_CREDENTIALS_REQUEST, ALTER_USER_SCRAM_CREDENTIALS_RESPONSE),
]
