"""The ACL admin APIs: DescribeAcls (29), CreateAcls (30), DeleteAcls (31)."""

from __future__ import annotations

from rill.protocol.schema import Field, field, message


def _binding(name_field: str, pattern_field: str, nullable_filter: bool) -> list[Field]:
    nullable = "0+" if nullable_filter else None
    return [
        field("ResourceType" + ("Filter" if nullable_filter else ""), "int8", "0+"),
        field(name_field, "string", "0+", nullable=nullable),
        field(pattern_field, "int8", "1+", default=3),
        field("Principal" + ("Filter" if nullable_filter else ""), "string", "0+", nullable=nullable),
        field("Host" + ("Filter" if nullable_filter else ""), "string", "0+", nullable=nullable),
        field("Operation", "int8", "0+"),
        field("PermissionType", "int8", "0+"),
    ]


DESCRIBE_ACLS_REQUEST = message(
    "DescribeAclsRequest", 29, "0-3", "2+", _binding("ResourceNameFilter", "PatternTypeFilter", True)
)

DESCRIBE_ACLS_RESPONSE = message(
    "DescribeAclsResponse",
    29,
    "0-3",
    "2+",
    [
        field("ThrottleTimeMs", "int32", "0+"),
        field("ErrorCode", "int16", "0+"),
        field("ErrorMessage", "string", "0+", nullable="0+"),
        field(
            "Resources",
            "[]DescribeAclsResource",
            "0+",
            fields=[
                field("ResourceType", "int8", "0+"),
                field("ResourceName", "string", "0+"),
                field("PatternType", "int8", "1+", default=3),
                field(
                    "Acls",
                    "[]AclDescription",
                    "0+",
                    fields=[
                        field("Principal", "string", "0+"),
                        field("Host", "string", "0+"),
                        field("Operation", "int8", "0+"),
                        field("PermissionType", "int8", "0+"),
                    ],
                ),
            ],
        ),
    ],
)

CREATE_ACLS_REQUEST = message(
    "CreateAclsRequest",
    30,
    "0-3",
    "2+",
    [
        field(
            "Creations",
            "[]AclCreation",
            "0+",
            fields=_binding("ResourceName", "ResourcePatternType", False),
        ),
    ],
)

CREATE_ACLS_RESPONSE = message(
    "CreateAclsResponse",
    30,
    "0-3",
    "2+",
    [
        field("ThrottleTimeMs", "int32", "0+"),
        field(
            "Results",
            "[]AclCreationResult",
            "0+",
            fields=[
                field("ErrorCode", "int16", "0+"),
                field("ErrorMessage", "string", "0+", nullable="0+"),
            ],
        ),
    ],
)

DELETE_ACLS_REQUEST = message(
    "DeleteAclsRequest",
    31,
    "0-3",
    "2+",
    [
        field(
            "Filters",
            "[]DeleteAclsFilter",
            "0+",
            fields=_binding("ResourceNameFilter", "PatternTypeFilter", True),
        ),
    ],
)

DELETE_ACLS_RESPONSE = message(
    "DeleteAclsResponse",
    31,
    "0-3",
    "2+",
    [
        field("ThrottleTimeMs", "int32", "0+"),
        field(
            "FilterResults",
            "[]DeleteAclsFilterResult",
            "0+",
            fields=[
                field("ErrorCode", "int16", "0+"),
                field("ErrorMessage", "string", "0+", nullable="0+"),
                field(
                    "MatchingAcls",
                    "[]DeleteAclsMatchingAcl",
                    "0+",
                    fields=[
                        field("ErrorCode", "int16", "0+"),
                        field("ErrorMessage", "string", "0+", nullable="0+"),
                        field("ResourceType", "int8", "0+"),
                        field("ResourceName", "string", "0+"),
                        field("PatternType", "int8", "1+", default=3),
                        field("Principal", "string", "0+"),
                        field("Host", "string", "0+"),
                        field("Operation", "int8", "0+"),
                        field("PermissionType", "int8", "0+"),
                    ],
                ),
            ],
        ),
    ],
)

APIS = [
    (DESCRIBE_ACLS_REQUEST, DESCRIBE_ACLS_RESPONSE),
    (CREATE_ACLS_REQUEST, CREATE_ACLS_RESPONSE),
    (DELETE_ACLS_REQUEST, DELETE_ACLS_RESPONSE),
]
