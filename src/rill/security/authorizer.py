"""The ACL authorizer (Kafka's AclAuthorizer / StandardAuthorizer rules).

A request is allowed when its principal is a super user; otherwise the ACLs that apply to the resource (its
literal pattern, the literal wildcard ``*`` and every prefixed pattern its name starts with) decide:

- a DENY whose principal is the caller's or ``User:*``, whose host is the client's or ``*`` and whose operation
  is the one asked or ALL refuses, whatever else allows;
- an ALLOW of the same kind permits; DESCRIBE is also allowed by READ, WRITE, DELETE or ALTER, and
  DESCRIBE_CONFIGS by ALTER_CONFIGS;
- no ACL applying to the resource at all: ``allow.everyone.if.no.acl.found`` decides.

Hosts are compared as addresses: an ACL's host and the client's are read as IP addresses where they are
ones, so ``0:0:0:0:0:0:0:1`` (the form Kafka's Java tools write, ``InetAddress.getHostAddress``), ``::1`` and
``[::1]`` are one host, and an IPv4 client on a dual-stack listener (``::ffff:10.0.0.7``) is ``10.0.0.7``.

The ACLs are the metadata store's (:class:`rill.security.acl.AclCache`), so a change made through any broker
is in effect wherever the store shows it.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
from collections.abc import Callable, Iterable

from rill.security.acl import (
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AccessControlEntry,
    AclCache,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
)
from rill.security.principal import KafkaPrincipal

log = logging.getLogger("rill.authorizer")

_IMPLIED = {
    AclOperation.DESCRIBE: frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                                      AclOperation.DELETE, AclOperation.ALTER}),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}),
}  # fmt: skip


@functools.lru_cache(maxsize=4096)
def canonical_host(host: str) -> str:
    """An IP address in one spelling (IPv6 compressed, IPv4-mapped IPv6 as IPv4); anything else as given."""
    text = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def _host_matches(acl_host: str, client: str) -> bool:
    return acl_host == WILDCARD or canonical_host(acl_host) == client


def parse_super_users(value: str | None) -> frozenset[str]:
    return frozenset(s.strip() for s in (value or "").split(";") if s.strip())


class AclAuthorizer:
    def __init__(self, acls: Callable[[], AclCache], super_users: Iterable[str], allow_if_no_acl: bool) -> None:
        self._acls = acls
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl

    def authorize(
        self,
        principal: KafkaPrincipal,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
        log_denied: bool = True,
    ) -> bool:
        """Whether ``principal`` from ``host`` may do ``operation`` on the resource; a refusal is logged at INFO
        unless ``log_denied`` is False (a list filtered to what the caller may see, as Kafka does)."""
        allowed = self._decide(str(principal), host, operation, resource_type, name)
        if not allowed and log_denied:
            log.info("Principal = %s is Denied Operation = %s from host = %s on resource = %s:LITERAL:%s",
                     principal, operation.name, host, resource_type.name, name)  # fmt: skip
        return allowed

    def _decide(self, principal: str, host: str, op: AclOperation, rtype: ResourceType, name: str) -> bool:
        if principal in self.super_users:
            return True
        entries = self._acls().matching(rtype, name)
        if not entries:
            return self.allow_if_no_acl
        principals = (principal, WILDCARD_PRINCIPAL)
        client = canonical_host(host)

        def applies(e: AccessControlEntry) -> bool:
            return e.principal in principals and _host_matches(e.host, client)

        if any(
            e.permission == PermissionType.DENY and e.operation in (op, AclOperation.ALL) and applies(e)
            for e in entries
        ):
            return False
        allowed_by = _IMPLIED.get(op, frozenset({op}))
        return any(
            e.permission == PermissionType.ALLOW
            and (e.operation == AclOperation.ALL or e.operation in allowed_by)
            and applies(e)
            for e in entries
        )

    def authorize_any(
        self, principal: KafkaPrincipal, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """Whether ``principal`` may perform ``operation`` on at least one resource of ``resource_type`` (Kafka's
        ``authorizeByResourceType``): an ALLOW on some pattern that no DENY covers (a DENY on the wildcard, on
        the same literal, or on a prefix of the pattern's name)."""
        who = str(principal)
        if who in self.super_users:
            return True
        principals, client = (who, WILDCARD_PRINCIPAL), canonical_host(host)
        allows: list[tuple[PatternType, str]] = []
        denies: list[tuple[PatternType, str]] = []
        any_acl = False
        cache = self._acls()
        for pattern in cache.patterns():
            if pattern.resource_type != resource_type:
                continue
            for e in cache.entries(pattern):
                any_acl = True
                if e.principal not in principals or not _host_matches(e.host, client):
                    continue
                if e.operation not in (operation, AclOperation.ALL):
                    continue
                (allows if e.permission == PermissionType.ALLOW else denies).append(
                    (pattern.pattern_type, pattern.name)
                )
        if not any_acl:
            return self.allow_if_no_acl
        if (PatternType.LITERAL, WILDCARD) in denies:
            return False
        for kind, name in allows:
            covered = any(
                (dk == PatternType.PREFIXED and name.startswith(dn))
                or (dk == kind == PatternType.LITERAL and dn == name)
                for dk, dn in denies
            )
            if not covered:
                return True
        return False
