"""Exceptions raised by the codec. Nothing else escapes a decode or encode call."""

from __future__ import annotations


class ProtocolError(Exception):
    """Base class of codec errors."""


class ProtocolDecodeError(ProtocolError):
    """A frame or field could not be decoded (truncated, bad length, bad UTF-8...).

    When the request header was readable, ``api_key``, ``api_version`` and ``correlation_id`` say which
    request failed so the caller can log it (or answer it) before closing the connection.
    """

    def __init__(
        self,
        message: str,
        *,
        api_key: int | None = None,
        api_version: int | None = None,
        correlation_id: int | None = None,
    ) -> None:
        super().__init__(message)
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


class UnsupportedVersionError(ProtocolDecodeError):
    """The API key is unknown to the codec or the version is outside its declared range."""


class ProtocolEncodeError(ProtocolError):
    """A body could not be encoded (wrong type, null in a non-nullable field, value out of range)."""
