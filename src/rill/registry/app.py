"""Confluent Schema Registry's REST resources over ``RegistryState``.

``RegistryApp.handle`` takes a parsed request and returns ``(status, json)``; it raises nothing but
answers every refusal as Confluent's ``{"error_code", "message"}``. Reads are served from the state;
writes are validated against a state caught up to the end of the topic, then written (the state
changes only when the records are read back), under one lock so a leader allocates ids and versions
one write at a time.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from rill.registry import errors as E
from rill.registry.errors import RegistryError
from rill.registry.schemas import (
    PROTOBUF,
    SCHEMA_TYPES,
    Reference,
    SchemaText,
    check_level,
    incompatibilities,
    parse_canonical,
    prepare,
    render,
    schema_from_request,
)
from rill.registry.store import (
    MODES,
    Record,
    RegistryState,
    Version,
    config_record,
    mode_record,
    schema_record,
    schema_tombstone,
)
from rill.registry.topic import SchemaTopic

log = logging.getLogger(__name__)

Query = Mapping[str, str]
Reply = tuple[int, Any]
MAX_VERSION = 2**31 - 1


def _flag(query: Query, name: str) -> bool:
    return query.get(name, "false").strip().lower() == "true"


def _body(raw: bytes) -> Any:
    if not raw.strip():
        return {}
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as e:  # RecursionError: nested past the parser's depth
        raise RegistryError(400, f"Unrecognized request body (not JSON): {e}", status=400) from None


def _version_number(text: str) -> int | None:
    """None for "latest" (or -1); 42202 unless a version in [1, 2^31-1]."""
    if text == "latest" or text == "-1":
        return None
    if re.fullmatch(r"[0-9]{1,10}", text) and 1 <= int(text) <= MAX_VERSION:
        return int(text)
    raise E.invalid_version(text)


class RegistryApp:
    def __init__(self, state: RegistryState, topic: SchemaTopic, may_write: Callable[[], bool] = lambda: True) -> None:
        self.state = state
        self.topic = topic
        self.may_write = may_write  # whether this instance leads (checked again under the write lock)
        self._write_lock = asyncio.Lock()
        self._routes: list[tuple[str, re.Pattern[str], Callable[..., Awaitable[Reply]]]] = []
        table: list[tuple[str, str, Callable[..., Awaitable[Reply]]]] = [
            ("GET", r"/", self.root),
            ("GET", r"/schemas", self.list_schemas),
            ("GET", r"/schemas/types", self.schema_types),
            ("GET", r"/contexts", self.contexts),
            ("GET", r"/schemas/ids/(?P<sid>[^/]+)", self.schema_by_id),
            ("GET", r"/schemas/ids/(?P<sid>[^/]+)/schema", self.raw_schema_by_id),
            ("GET", r"/schemas/ids/(?P<sid>[^/]+)/versions", self.versions_of_id),
            ("GET", r"/schemas/ids/(?P<sid>[^/]+)/subjects", self.subjects_of_id),
            ("GET", r"/subjects", self.list_subjects),
            ("POST", r"/subjects/(?P<subject>[^/]+)", self.lookup),
            ("DELETE", r"/subjects/(?P<subject>[^/]+)", self.delete_subject),
            ("GET", r"/subjects/(?P<subject>[^/]+)/versions", self.list_versions),
            ("POST", r"/subjects/(?P<subject>[^/]+)/versions", self.register),
            ("GET", r"/subjects/(?P<subject>[^/]+)/versions/(?P<version>[^/]+)", self.get_version),
            ("DELETE", r"/subjects/(?P<subject>[^/]+)/versions/(?P<version>[^/]+)", self.delete_version),
            ("GET", r"/subjects/(?P<subject>[^/]+)/versions/(?P<version>[^/]+)/schema", self.raw_version),
            ("GET", r"/subjects/(?P<subject>[^/]+)/versions/(?P<version>[^/]+)/referencedby", self.referenced_by),
            ("GET", r"/config", self.get_config),
            ("PUT", r"/config", self.put_config),
            ("DELETE", r"/config", self.delete_config),
            ("GET", r"/config/(?P<subject>[^/]+)", self.get_config),
            ("PUT", r"/config/(?P<subject>[^/]+)", self.put_config),
            ("DELETE", r"/config/(?P<subject>[^/]+)", self.delete_config),
            ("POST", r"/compatibility/subjects/(?P<subject>[^/]+)/versions", self.check_compatibility),
            (
                "POST",
                r"/compatibility/subjects/(?P<subject>[^/]+)/versions/(?P<version>[^/]+)",
                self.check_compatibility,
            ),
            ("GET", r"/mode", self.get_mode),
            ("PUT", r"/mode", self.put_mode),
            ("DELETE", r"/mode", self.delete_mode),
            ("GET", r"/mode/(?P<subject>[^/]+)", self.get_mode),
            ("PUT", r"/mode/(?P<subject>[^/]+)", self.put_mode),
            ("DELETE", r"/mode/(?P<subject>[^/]+)", self.delete_mode),
        ]
        for method, pattern, fn in table:
            self._routes.append((method, re.compile(pattern + "/?"), fn))

    @staticmethod
    def is_write(method: str, path: str) -> bool:
        """Whether the request changes the registry (forwarded to the leader by a follower)."""
        if method in ("PUT", "DELETE"):
            return True
        return method == "POST" and path.rstrip("/").endswith("/versions") and path.startswith("/subjects/")

    async def handle(self, method: str, path: str, query: Query, raw: bytes) -> Reply:
        from urllib.parse import unquote

        try:
            allowed = False
            for m, pattern, fn in self._routes:
                match = pattern.fullmatch(path)
                if match is None:
                    continue
                allowed = True
                if m != method:
                    continue
                args = {k: unquote(v) for k, v in match.groupdict().items()}
                return await fn(query=query, body=raw, **args)
            if allowed:
                return 405, {"error_code": 405, "message": "HTTP 405 Method Not Allowed"}
            return 404, {"error_code": 404, "message": "HTTP 404 Not Found"}
        except RegistryError as e:
            return e.status, e.body()
        except Exception as e:  # a bug must not take the server down: answer 500 as Confluent does
            log.exception("Registry request %s %s failed", method, path)
            return 500, {"error_code": 50001, "message": f"Error in the backend data store: {e}"}

    async def _write(self, prepare: Callable[[], tuple[list[Record], Any]]) -> Any:
        """Catch up, validate and build records (``prepare``), write them, answer ``prepare``'s reply."""
        async with self._write_lock:
            if not self.may_write():
                raise RegistryError(E.UNKNOWN_LEADER, "This instance is no longer the registry leader")
            await self.topic.catch_up()
            records, reply = prepare()
            if records:
                await self.topic.write(records)
            return reply

    # -- lookups -------------------------------------------------------------------------------------

    def _live_versions(self, subject: str, deleted: bool = False) -> list[Version]:
        found = self.state.versions(subject, deleted=deleted)
        if not found:
            raise E.subject_not_found(subject)
        return found

    def _version(self, subject: str, text: str, *, deleted: bool = False) -> Version:
        number = _version_number(text)
        versions = self._live_versions(subject, deleted)
        if number is None:
            return versions[-1]
        for v in versions:
            if v.version == number:
                return v
        raise E.version_not_found(number)

    async def _schema_id(self, text: str) -> int:
        try:
            schema_id = int(text)
        except ValueError:
            raise E.schema_not_found() from None
        if schema_id not in self.state.schemas:
            await self.topic.catch_up()  # a schema registered through another instance a moment ago
        if schema_id not in self.state.schemas:
            raise E.schema_not_found(schema_id)
        return schema_id

    # -- /  and /schemas -----------------------------------------------------------------------------

    async def root(self, **_: Any) -> Reply:
        return 200, {}

    async def contexts(self, **_: Any) -> Reply:
        return 200, ["."]  # the default context only

    async def list_schemas(self, query: Query, **_: Any) -> Reply:
        prefix, deleted, latest_only = (
            query.get("subjectPrefix", ""),
            _flag(query, "deleted"),
            _flag(query, "latestOnly"),
        )
        out: list[dict[str, Any]] = []
        for subject in self.state.subject_names(deleted=deleted):
            if subject.startswith(prefix):
                versions = self.state.versions(subject, deleted=deleted)
                out.extend(v.to_json(query.get("format")) for v in (versions[-1:] if latest_only else versions))
        return 200, out

    async def schema_types(self, **_: Any) -> Reply:
        return 200, list(SCHEMA_TYPES)

    async def schema_by_id(self, sid: str, query: Query, **_: Any) -> Reply:
        schema = self.state.schemas[await self._schema_id(sid)]
        out: dict[str, Any] = {"schema": render(schema, query.get("format"))}
        if schema.schema_type != "AVRO":
            out["schemaType"] = schema.schema_type
        if schema.references:
            out["references"] = [r.to_json() for r in schema.references]
        return 200, out

    async def raw_schema_by_id(self, sid: str, query: Query, **_: Any) -> Reply:
        return 200, _raw(self.state.schemas[await self._schema_id(sid)], query)

    def _holders(self, schema_id: int, deleted: bool) -> list[Version]:
        found = [
            self.state.subjects[s][v]
            for s, v in self.state.users.get(schema_id, set())
            if v in self.state.subjects.get(s, {})
        ]
        return sorted((v for v in found if deleted or not v.deleted), key=lambda v: (v.subject, v.version))

    async def versions_of_id(self, sid: str, query: Query, **_: Any) -> Reply:
        holders = self._holders(await self._schema_id(sid), _flag(query, "deleted"))
        return 200, [{"subject": v.subject, "version": v.version} for v in holders]

    async def subjects_of_id(self, sid: str, query: Query, **_: Any) -> Reply:
        holders = self._holders(await self._schema_id(sid), _flag(query, "deleted"))
        return 200, sorted({v.subject for v in holders})

    # -- /subjects -----------------------------------------------------------------------------------

    async def list_subjects(self, query: Query, **_: Any) -> Reply:
        prefix = query.get("subjectPrefix", "")
        if _flag(query, "deletedOnly"):
            names = [s for s in self.state.subject_names(deleted=True) if not self.state.versions(s)]
        else:
            names = self.state.subject_names(deleted=_flag(query, "deleted"))
        return 200, [s for s in names if s.startswith(prefix)]

    async def list_versions(self, subject: str, query: Query, **_: Any) -> Reply:
        return 200, [v.version for v in self._live_versions(subject, _flag(query, "deleted"))]

    async def get_version(self, subject: str, version: str, query: Query, **_: Any) -> Reply:
        return 200, self._version(subject, version, deleted=_flag(query, "deleted")).to_json(query.get("format"))

    async def raw_version(self, subject: str, version: str, query: Query, **_: Any) -> Reply:
        return 200, _raw(self._version(subject, version, deleted=_flag(query, "deleted")).schema, query)

    async def referenced_by(self, subject: str, version: str, **_: Any) -> Reply:
        v = self._version(subject, version)
        return 200, self.state.referenced_by(v.subject, v.version)

    def _referenced(self, references: tuple[Reference, ...]) -> list[tuple[str, SchemaText]]:
        """Every schema ``references`` reach (their own references too), dependencies first, each once, as
        (reference name, schema); 42201 when one is missing or deleted."""
        out: list[tuple[str, SchemaText]] = []
        seen: set[tuple[str, int]] = set()

        def visit(refs: tuple[Reference, ...], depth: int) -> None:
            if depth > 32:
                raise E.invalid_schema("references nest more than 32 deep")
            for ref in refs:
                if (ref.subject, ref.version) in seen:
                    continue
                seen.add((ref.subject, ref.version))
                found = self.state.subjects.get(ref.subject, {}).get(ref.version)
                if found is None or found.deleted:
                    raise E.invalid_schema(f"reference {ref.name!r} to {ref.subject} version {ref.version} not found")
                visit(found.schema.references, depth + 1)
                out.append((ref.name, found.schema))

        visit(references, 0)
        return out

    async def _prepared(self, body: Any) -> tuple[SchemaText, Any]:
        """The request's schema in canonical form, and parsed (its references resolved)."""
        schema = schema_from_request(body)
        return await prepare(schema, self._referenced(schema.references))

    def _previous(self, versions: list[Version]) -> list[tuple[int, Any]]:
        out = []
        for v in versions:
            try:
                out.append((v.version, parse_canonical(v.schema, self._referenced(v.schema.references))))
            except RegistryError as e:  # a stored schema that no longer parses: skipped, as nothing can read it
                log.warning("Schema %s version %d cannot be parsed again: %s", v.subject, v.version, e.message)
        return out

    async def lookup(self, subject: str, query: Query, body: bytes, **_: Any) -> Reply:
        deleted = _flag(query, "deleted")
        versions = self._live_versions(subject, deleted)
        schema, _parsed = await self._prepared(_body(body))
        for v in reversed(versions):
            if v.schema.identity == schema.identity:
                return 200, v.to_json(query.get("format"))
        raise E.schema_not_found()

    async def register(self, subject: str, body: bytes, **_: Any) -> Reply:
        request = _body(body)
        await self.topic.catch_up()
        schema, parsed = await self._prepared(request)  # before the write lock: a Protobuf text compiles

        def build() -> tuple[list[Record], Any]:
            mode = self.state.mode(subject)
            if mode in ("READONLY", "READONLY_OVERRIDE"):
                raise RegistryError(E.OPERATION_NOT_PERMITTED, f"Subject {subject} is in read-only mode")
            self._referenced(schema.references)  # still there once caught up
            wanted_id = request.get("id") if isinstance(request, dict) else None
            wanted_version = request.get("version") if isinstance(request, dict) else None
            if (wanted_id is not None or wanted_version is not None) and mode != "IMPORT":
                raise RegistryError(E.OPERATION_NOT_PERMITTED, f"Subject {subject} is not in import mode")
            every = self.state.versions(subject, deleted=True)
            live = [v for v in every if not v.deleted]
            for v in live:
                if v.schema.identity == schema.identity and wanted_id in (None, v.schema_id):
                    return [], {"id": v.schema_id, "version": v.version}
            if mode != "IMPORT":
                problems = incompatibilities(parsed, self._previous(live), self.state.compatibility(subject),
                                             schema.schema_type)  # fmt: skip
                if problems:
                    raise RegistryError(
                        E.INCOMPATIBLE_SCHEMA,
                        f"Schema being registered is incompatible with an earlier schema for subject "
                        f'"{subject}", details: [{", ".join(problems)}]',
                    )
            schema_id = self.state.id_for(schema)
            if wanted_id is not None:
                if not isinstance(wanted_id, int) or wanted_id < 1:
                    raise E.invalid_schema("'id' must be a positive integer")
                held = self.state.schemas.get(wanted_id)
                if held is not None and held.identity != schema.identity:
                    raise RegistryError(42207, f"Schema id {wanted_id} already holds a different schema")
                schema_id = wanted_id
            if schema_id is None:
                schema_id = self.state.max_id + 1
            version = (every[-1].version + 1) if every else 1
            if wanted_version is not None:
                if not isinstance(wanted_version, int) or not 1 <= wanted_version <= MAX_VERSION:
                    raise E.invalid_version(str(wanted_version))
                if any(v.version == wanted_version for v in every):
                    raise E.invalid_version(str(wanted_version))
                version = wanted_version
            record = schema_record(Version(subject, version, schema_id, schema, False))
            return [record], {"id": schema_id, "version": version}

        reply = await self._write(build)
        return 200, {"id": reply["id"]}

    async def delete_subject(self, subject: str, query: Query, **_: Any) -> Reply:
        permanent = _flag(query, "permanent")

        def prepare() -> tuple[list[Record], Any]:
            self._check_writable(subject)
            every = self._live_versions(subject, deleted=True)
            live = [v for v in every if not v.deleted]
            if permanent:
                if live:
                    raise RegistryError(
                        E.SUBJECT_NOT_SOFT_DELETED,
                        f"Subject '{subject}' was not deleted first before being permanently deleted",
                    )
                records = [schema_tombstone(subject, v.version) for v in every]
                if subject in self.state.configs:
                    records.append(config_record(subject, None))
                if subject in self.state.modes:
                    records.append(mode_record(subject, None))
                return records, [v.version for v in every]
            if not live:
                raise RegistryError(
                    E.SUBJECT_SOFT_DELETED,
                    f"Subject '{subject}' was soft deleted.Set permanent=true to delete permanently",
                )
            for v in live:
                self._check_unreferenced(v)
            return [schema_record(_deleted(v)) for v in live], [v.version for v in live]

        return 200, await self._write(prepare)

    async def delete_version(self, subject: str, version: str, query: Query, **_: Any) -> Reply:
        permanent = _flag(query, "permanent")
        number = _version_number(version)

        def prepare() -> tuple[list[Record], Any]:
            self._check_writable(subject)
            every = self._live_versions(subject, deleted=True)
            live = [v for v in every if not v.deleted]
            if number is None:
                candidates = every if permanent else live
                if not candidates:
                    raise E.version_not_found(version)
                target = candidates[-1]
            else:
                found = [v for v in every if v.version == number]
                if not found:
                    raise E.version_not_found(number)
                target = found[0]
            if permanent:
                if not target.deleted:
                    raise RegistryError(
                        E.VERSION_NOT_SOFT_DELETED,
                        f"Subject '{subject}' Version {target.version} was not deleted first before being "
                        "permanently deleted",
                    )
                return [schema_tombstone(subject, target.version)], target.version
            if target.deleted:
                raise RegistryError(
                    E.VERSION_SOFT_DELETED,
                    f"Subject '{subject}' Version {target.version} was soft deleted.Set permanent=true to delete "
                    "permanently",
                )
            self._check_unreferenced(target)
            return [schema_record(_deleted(target))], target.version

        return 200, await self._write(prepare)

    def _check_writable(self, subject: str | None) -> None:
        if self.state.mode(subject) in ("READONLY", "READONLY_OVERRIDE"):
            raise RegistryError(E.OPERATION_NOT_PERMITTED, f"Subject {subject} is in read-only mode")

    def _check_unreferenced(self, v: Version) -> None:
        users = self.state.referenced_by(v.subject, v.version)
        if users:
            raise RegistryError(
                E.REFERENCE_EXISTS,
                f"One or more references exist to the schema {{subject={v.subject}, version={v.version}}}",
            )

    # -- /config and /mode ---------------------------------------------------------------------------

    async def get_config(self, query: Query, subject: str | None = None, **_: Any) -> Reply:
        if subject is not None and subject not in self.state.configs and not _flag(query, "defaultToGlobal"):
            raise RegistryError(
                E.SUBJECT_COMPATIBILITY_NOT_CONFIGURED,
                f"Subject '{subject}' does not have subject-level compatibility configured",
            )
        return 200, {"compatibilityLevel": self.state.compatibility(subject)}

    async def put_config(self, body: bytes, subject: str | None = None, **_: Any) -> Reply:
        request = _body(body)
        level = check_level(request.get("compatibility") if isinstance(request, dict) else None)
        await self._write(lambda: ([config_record(subject, level)], None))
        return 200, {"compatibility": level}

    async def delete_config(self, subject: str | None = None, **_: Any) -> Reply:
        def prepare() -> tuple[list[Record], Any]:
            if subject is not None and subject not in self.state.configs:
                raise E.subject_not_found(subject)
            return [config_record(subject, None)], {"compatibilityLevel": self.state.compatibility(subject)}

        return 200, await self._write(prepare)

    async def get_mode(self, query: Query, subject: str | None = None, **_: Any) -> Reply:
        if subject is not None and subject not in self.state.modes and not _flag(query, "defaultToGlobal"):
            raise RegistryError(
                E.SUBJECT_MODE_NOT_CONFIGURED, f"Subject '{subject}' does not have subject-level mode configured"
            )
        return 200, {"mode": self.state.mode(subject)}

    async def put_mode(self, query: Query, body: bytes, subject: str | None = None, **_: Any) -> Reply:
        request = _body(body)
        mode = request.get("mode") if isinstance(request, dict) else None
        if not isinstance(mode, str) or mode.upper() not in MODES:
            raise RegistryError(E.INVALID_MODE, f"Invalid mode. Valid values are {', '.join(MODES)}")
        mode = mode.upper()

        def prepare() -> tuple[list[Record], Any]:
            if mode == "IMPORT" and not _flag(query, "force"):
                has = self.state.versions(subject, deleted=True) if subject else self.state.subject_names(deleted=True)
                if has:
                    raise RegistryError(
                        E.OPERATION_NOT_PERMITTED, "Cannot import since found existing subjects (use force=true)"
                    )
            return [mode_record(subject, mode)], None

        await self._write(prepare)
        return 200, {"mode": mode}

    async def delete_mode(self, subject: str | None = None, **_: Any) -> Reply:
        def prepare() -> tuple[list[Record], Any]:
            if subject is not None and subject not in self.state.modes:
                raise E.subject_not_found(subject)
            return [mode_record(subject, None)], {"mode": self.state.mode(subject)}

        return 200, await self._write(prepare)

    # -- /compatibility ------------------------------------------------------------------------------

    async def check_compatibility(
        self, subject: str, query: Query, body: bytes, version: str | None = None, **_: Any
    ) -> Reply:
        schema, parsed = await self._prepared(_body(body))
        level = self.state.compatibility(subject)
        if version is None:
            live = self.state.versions(subject)
            previous = self._previous(live)
        else:
            target = self._version(subject, version)
            previous = self._previous([target])
            level = level.removesuffix("_TRANSITIVE")
        problems = incompatibilities(parsed, previous, level, schema.schema_type)
        out: dict[str, Any] = {"is_compatible": not problems}
        if _flag(query, "verbose"):
            out["messages"] = problems
        return 200, out


def _raw(schema: SchemaText, query: Query) -> Any:
    """The schema itself, as ``/schema`` answers it: Avro and JSON schemas as JSON, Protobuf as text."""
    if schema.schema_type == PROTOBUF:
        return render(schema, query.get("format"))
    return json.loads(schema.text)


def _deleted(v: Version) -> Version:
    return Version(v.subject, v.version, v.schema_id, v.schema, True)
