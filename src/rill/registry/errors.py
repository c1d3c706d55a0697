"""Confluent Schema Registry's error codes and the exception that carries one to the HTTP layer.

Every refused request answers ``{"error_code": CODE, "message": TEXT}`` with the HTTP status that is
the code's first three digits (``40401`` -> 404), as Confluent's registry does.
"""

from __future__ import annotations

SUBJECT_NOT_FOUND = 40401
VERSION_NOT_FOUND = 40402
SCHEMA_NOT_FOUND = 40403
SUBJECT_SOFT_DELETED = 40404
SUBJECT_NOT_SOFT_DELETED = 40405
VERSION_SOFT_DELETED = 40406
VERSION_NOT_SOFT_DELETED = 40407
SUBJECT_COMPATIBILITY_NOT_CONFIGURED = 40408
SUBJECT_MODE_NOT_CONFIGURED = 40409
INCOMPATIBLE_SCHEMA = 409  # Confluent answers HTTP 409 with error_code 409
INVALID_SCHEMA = 42201
INVALID_VERSION = 42202
INVALID_COMPATIBILITY_LEVEL = 42203
INVALID_MODE = 42204
OPERATION_NOT_PERMITTED = 42205
REFERENCE_EXISTS = 42206
INVALID_SUBJECT = 42208
STORE_ERROR = 50001
OPERATION_TIMEOUT = 50002
FORWARDING_FAILED = 50003
UNKNOWN_LEADER = 50004


class RegistryError(Exception):
    """A refused request: ``status`` is the HTTP status, ``code`` Confluent's error code."""

    def __init__(self, code: int, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status if status is not None else int(str(code)[:3])

    def body(self) -> dict[str, object]:
        return {"error_code": self.code, "message": self.message}


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")


def version_not_found(version: int | str) -> RegistryError:
    return RegistryError(VERSION_NOT_FOUND, f"Version {version} not found.")


def schema_not_found(schema_id: int | None = None) -> RegistryError:
    return RegistryError(SCHEMA_NOT_FOUND, "Schema not found" if schema_id is None else f"Schema {schema_id} not found")


def invalid_version(version: str) -> RegistryError:
    return RegistryError(
        INVALID_VERSION,
        f"The specified version '{version}' is not a valid version id. Allowed values are between "
        '[1, 2^31-1] and the string "latest"',
    )


def invalid_schema(detail: str) -> RegistryError:
    return RegistryError(INVALID_SCHEMA, f"Invalid schema: {detail}")
