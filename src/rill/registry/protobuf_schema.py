"""Protobuf (``schemaType: PROTOBUF``): schemas given as ``.proto`` text or as a base64 ``FileDescriptorProto``
(what confluent-kafka's Python serializer registers), compiled and compared with the ``protobuf`` package's
descriptors.

``.proto`` text is compiled by ``protoc`` (the ``grpcio-tools`` package ships it with Google's well-known
types), its imports resolved from the referenced schemas (a reference's ``name`` is the import path) and the
well-known types (``google/protobuf/*.proto``, which need no reference). Either form becomes one normalized
``FileDescriptorProto`` (no source locations, no derived JSON names), whose base64 is the schema's identity
and what ``?format=serialized`` answers; the ``.proto`` text answered otherwise is printed from it.

Compatibility compares the messages of a reader and a writer schema by their full names and field numbers,
after Confluent's Protobuf rules: the package changed, a message removed, a field's kind (scalar, message,
enum, map or repeated) changed, a scalar type changed to one the wire format cannot read as it (int32,
int64, uint32, uint64 and bool read each other; sint32/sint64; fixed32/sfixed32; fixed64/sfixed64;
string/bytes), a field's message or enum type changed, a required field added or removed, several existing
fields moved into one oneof. Adding or removing an optional field is compatible.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import os
import sys
import tempfile
import weakref
from collections.abc import Iterator, Sequence

from google.protobuf import descriptor_pb2

from rill.registry.errors import invalid_schema

FDP = descriptor_pb2.FileDescriptorProto
FD = descriptor_pb2.FieldDescriptorProto
WELL_KNOWN_PREFIX = "google/protobuf/"
_COMPILE_TIMEOUT_S = 30.0
MAX_CONCURRENT_COMPILES = 2
"""protoc runs at a time (each is a Python interpreter of its own); more requests wait their turn, so that
clients posting many .proto schemas at once cannot make the registry start processes without bound."""
_compiles: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()
_WIRE_GROUPS = [
    {FD.TYPE_INT32, FD.TYPE_INT64, FD.TYPE_UINT32, FD.TYPE_UINT64, FD.TYPE_BOOL},
    {FD.TYPE_SINT32, FD.TYPE_SINT64},
    {FD.TYPE_FIXED32, FD.TYPE_SFIXED32},
    {FD.TYPE_FIXED64, FD.TYPE_SFIXED64},
    {FD.TYPE_STRING, FD.TYPE_BYTES},
]
_SCALAR_NAMES = {
    FD.TYPE_DOUBLE: "double", FD.TYPE_FLOAT: "float", FD.TYPE_INT64: "int64", FD.TYPE_UINT64: "uint64",
    FD.TYPE_INT32: "int32", FD.TYPE_FIXED64: "fixed64", FD.TYPE_FIXED32: "fixed32", FD.TYPE_BOOL: "bool",
    FD.TYPE_STRING: "string", FD.TYPE_BYTES: "bytes", FD.TYPE_UINT32: "uint32", FD.TYPE_SFIXED32: "sfixed32",
    FD.TYPE_SFIXED64: "sfixed64", FD.TYPE_SINT32: "sint32", FD.TYPE_SINT64: "sint64",
}  # fmt: skip


def normalized(fdp: descriptor_pb2.FileDescriptorProto, name: str | None = None) -> descriptor_pb2.FileDescriptorProto:
    """A copy without what differs between compilers and clients for one schema (source info, derived JSON
    names, the file's own name, which readers set themselves: an importer names it by its import path)."""
    out = FDP()
    out.CopyFrom(fdp)
    out.ClearField("source_code_info")
    if name is not None:
        out.name = name
    else:
        out.ClearField("name")

    def strip(messages: Iterator[descriptor_pb2.DescriptorProto]) -> None:
        for m in messages:
            for f in m.field:
                f.ClearField("json_name")
            for f in m.extension:
                f.ClearField("json_name")
            strip(iter(m.nested_type))

    strip(iter(out.message_type))
    for f in out.extension:
        f.ClearField("json_name")
    return out


def encode(fdp: descriptor_pb2.FileDescriptorProto) -> str:
    return base64.standard_b64encode(fdp.SerializeToString(deterministic=True)).decode("ascii")


def decode(text: str) -> descriptor_pb2.FileDescriptorProto | None:
    """The descriptor of base64 ``text``, or None when ``text`` is not one (it is ``.proto`` text then)."""
    stripped = text.strip()
    if not stripped or any(c.isspace() for c in stripped) or "{" in stripped or ";" in stripped:
        return None
    try:
        raw = base64.standard_b64decode(stripped.encode("ascii"))
        fdp = FDP.FromString(raw)
    except (binascii.Error, ValueError, UnicodeEncodeError, Exception):
        return None
    return fdp if fdp.name or fdp.message_type or fdp.enum_type or fdp.package else None


async def compile_schema(text: str, referenced: Sequence[tuple[str, descriptor_pb2.FileDescriptorProto]],
                         name: str = "schema.proto") -> descriptor_pb2.FileDescriptorProto:  # fmt: skip
    """The normalized descriptor of ``text`` (base64 descriptor or ``.proto``); 42201 with protoc's message
    when it does not compile. ``referenced``: (import path, descriptor) of each reference, dependencies first."""
    given = decode(text)
    if given is not None:
        _check_imports(given, referenced)
        own = name if all(name != path for path, _ in referenced) else f"rill-registered-{name}"
        _check_builds(normalized(given, own), referenced)
        return normalized(given)
    loop = asyncio.get_running_loop()
    turns = _compiles.get(loop)
    if turns is None:
        turns = _compiles[loop] = asyncio.Semaphore(MAX_CONCURRENT_COMPILES)
    async with turns:
        return await _run_protoc(text, referenced, name)


async def _run_protoc(text: str, referenced: Sequence[tuple[str, descriptor_pb2.FileDescriptorProto]],
                      name: str) -> descriptor_pb2.FileDescriptorProto:  # fmt: skip
    import grpc_tools

    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    with tempfile.TemporaryDirectory(prefix="rill-proto-") as tmp:
        src = os.path.join(tmp, "src")
        os.mkdir(src)
        with open(os.path.join(src, name), "w", encoding="utf-8") as f:
            f.write(text)
        deps = descriptor_pb2.FileDescriptorSet()
        for import_path, fdp in referenced:
            deps.file.append(normalized(fdp, import_path))
        args = [sys.executable, "-m", "grpc_tools.protoc", f"-I{src}", f"-I{include}",
                f"--descriptor_set_out={os.path.join(tmp, 'out.pb')}", name]  # fmt: skip
        if deps.file:
            with open(os.path.join(tmp, "deps.pb"), "wb") as f:
                f.write(deps.SerializeToString())
            args.insert(3, f"--descriptor_set_in={os.path.join(tmp, 'deps.pb')}")
        proc = await asyncio.create_subprocess_exec(*args, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.PIPE)  # fmt: skip
        try:
            _, err = await asyncio.wait_for(proc.communicate(), _COMPILE_TIMEOUT_S)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise invalid_schema("protoc did not finish compiling the schema") from None
        if proc.returncode != 0:
            message = err.decode("utf-8", "replace").replace(src + os.sep, "").strip()
            raise invalid_schema(message or f"protoc failed ({proc.returncode})")
        with open(os.path.join(tmp, "out.pb"), "rb") as f:
            fds = descriptor_pb2.FileDescriptorSet.FromString(f.read())
    return normalized(fds.file[-1])


def _check_imports(fdp: descriptor_pb2.FileDescriptorProto,
                   referenced: Sequence[tuple[str, descriptor_pb2.FileDescriptorProto]]) -> None:  # fmt: skip
    known = {name for name, _ in referenced}
    for dep in fdp.dependency:
        if not dep.startswith(WELL_KNOWN_PREFIX) and dep not in known:
            raise invalid_schema(f"import {dep!r} has no reference naming it")


def _check_builds(fdp: descriptor_pb2.FileDescriptorProto,
                  referenced: Sequence[tuple[str, descriptor_pb2.FileDescriptorProto]]) -> None:  # fmt: skip
    """42201 unless ``fdp`` builds as protoc would have built it from text: every type it names exists, every
    field's oneof is declared, no name or number is used twice (a descriptor a client sends is only bytes)."""
    from google.protobuf import descriptor_pool

    _import_well_known()
    pool = descriptor_pool.DescriptorPool()
    loaded: set[str] = set()

    def load(f: descriptor_pb2.FileDescriptorProto) -> None:
        for dep in f.dependency:
            if dep.startswith(WELL_KNOWN_PREFIX) and dep not in loaded:
                try:
                    known = descriptor_pool.Default().FindFileByName(dep)
                except KeyError:
                    raise invalid_schema(f"import {dep!r}: no such well-known type") from None
                proto = FDP()
                known.CopyToProto(proto)
                load(proto)
        pool.AddSerializedFile(f.SerializeToString())
        loaded.add(f.name)

    try:
        for import_path, dep in referenced:
            if import_path not in loaded:
                load(normalized(dep, import_path))
        load(fdp)
    except TypeError as e:  # the pool's refusal: "Couldn't build proto file into descriptor pool: ..."
        raise invalid_schema(str(e).split(": ", 1)[-1]) from None


def _import_well_known() -> None:
    """Google's well-known types in the default descriptor pool (imported, each module adds its file)."""
    from google.protobuf import (  # noqa: F401
        any_pb2,
        api_pb2,
        duration_pb2,
        empty_pb2,
        field_mask_pb2,
        source_context_pb2,
        struct_pb2,
        timestamp_pb2,
        type_pb2,
        wrappers_pb2,
    )


# -- printing ----------------------------------------------------------------------------------------------


def to_proto_text(fdp: descriptor_pb2.FileDescriptorProto) -> str:
    """``.proto`` text of a descriptor (what a default GET answers)."""
    lines = [f'syntax = "{fdp.syntax or "proto2"}";']
    if fdp.package:
        lines.append(f"package {fdp.package};")
    public = set(fdp.public_dependency)
    for i, dep in enumerate(fdp.dependency):
        lines.append(f'import {"public " if i in public else ""}"{dep}";')
    for key, value in _file_options(fdp):
        lines.append(f"option {key} = {value};")
    lines.append("")
    proto3 = fdp.syntax == "proto3"
    for m in fdp.message_type:
        lines.extend(_message(m, "", proto3))
    for e in fdp.enum_type:
        lines.extend(_enum(e, ""))
    for s in fdp.service:
        lines.append(f"service {s.name} {{")
        for method in s.method:
            cin, cout = ("stream " if method.client_streaming else ""), ("stream " if method.server_streaming else "")
            lines.append(f"  rpc {method.name}({cin}{method.input_type}) returns ({cout}{method.output_type});")
        lines.append("}")
    return "\n".join(lines) + "\n"


def _file_options(fdp: descriptor_pb2.FileDescriptorProto) -> list[tuple[str, str]]:
    out = []
    for field, value in fdp.options.ListFields():
        if isinstance(value, bool):
            out.append((field.name, "true" if value else "false"))
        elif isinstance(value, str):
            out.append((field.name, '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'))
        elif isinstance(value, int) and field.enum_type is not None:
            out.append((field.name, field.enum_type.values_by_number[value].name))
    return out


def _field_type(f: descriptor_pb2.FieldDescriptorProto) -> str:
    return f.type_name if f.type_name else _SCALAR_NAMES.get(f.type, "bytes")


def _message(m: descriptor_pb2.DescriptorProto, indent: str, proto3: bool) -> list[str]:
    maps = {n.name: n for n in m.nested_type if n.options.map_entry}
    lines = [f"{indent}message {m.name} {{"]
    inner = indent + "  "
    oneof_fields: dict[int, list[descriptor_pb2.FieldDescriptorProto]] = {}
    for f in m.field:
        if f.HasField("oneof_index") and not f.proto3_optional:
            oneof_fields.setdefault(f.oneof_index, []).append(f)
    printed_oneofs: set[int] = set()
    for f in m.field:
        if f.HasField("oneof_index") and not f.proto3_optional:
            if f.oneof_index in printed_oneofs:
                continue
            printed_oneofs.add(f.oneof_index)
            lines.append(f"{inner}oneof {m.oneof_decl[f.oneof_index].name} {{")
            for of in oneof_fields[f.oneof_index]:
                lines.append(f"{inner}  {_field_type(of)} {of.name} = {of.number};")
            lines.append(f"{inner}}}")
            continue
        entry = maps.get(f.type_name.rsplit(".", 1)[-1]) if f.label == FD.LABEL_REPEATED and f.type_name else None
        if entry is not None and f.type_name.endswith("." + entry.name):
            key, value = entry.field[0], entry.field[1]
            lines.append(f"{inner}map<{_field_type(key)}, {_field_type(value)}> {f.name} = {f.number};")
            continue
        label = ""
        if f.label == FD.LABEL_REPEATED:
            label = "repeated "
        elif f.label == FD.LABEL_REQUIRED:
            label = "required "
        elif not proto3 or f.proto3_optional:
            label = "optional "
        default = f" [default = {f.default_value}]" if f.HasField("default_value") and not proto3 else ""
        lines.append(f"{inner}{label}{_field_type(f)} {f.name} = {f.number}{default};")
    for r in m.reserved_range:
        lines.append(f"{inner}reserved {r.start}" + (f" to {r.end - 1};" if r.end - 1 > r.start else ";"))
    for name in m.reserved_name:
        lines.append(f'{inner}reserved "{name}";')
    for n in m.nested_type:
        if n.name not in maps:
            lines.extend(_message(n, inner, proto3))
    for e in m.enum_type:
        lines.extend(_enum(e, inner))
    lines.append(f"{indent}}}")
    return lines


def _enum(e: descriptor_pb2.EnumDescriptorProto, indent: str) -> list[str]:
    lines = [f"{indent}enum {e.name} {{"]
    lines.extend(f"{indent}  {v.name} = {v.number};" for v in e.value)
    lines.append(f"{indent}}}")
    return lines


# -- compatibility -------------------------------------------------------------------------------------------


def _messages(fdp: descriptor_pb2.FileDescriptorProto) -> dict[str, descriptor_pb2.DescriptorProto]:
    out: dict[str, descriptor_pb2.DescriptorProto] = {}

    def walk(prefix: str, messages: Sequence[descriptor_pb2.DescriptorProto]) -> None:
        for m in messages:
            full = f"{prefix}.{m.name}"
            out[full] = m
            walk(full, m.nested_type)

    walk(f".{fdp.package}" if fdp.package else "", fdp.message_type)
    return out


def _kind(f: descriptor_pb2.FieldDescriptorProto, messages: dict[str, descriptor_pb2.DescriptorProto]) -> str:
    if f.label == FD.LABEL_REPEATED:
        target = messages.get(f.type_name)
        if target is not None and target.options.map_entry:
            return "map"
        return "repeated"
    if f.type == FD.TYPE_MESSAGE or f.type == FD.TYPE_GROUP:
        return "message"
    if f.type == FD.TYPE_ENUM:
        return "enum"
    return "scalar"


def _same_wire(a: int, b: int) -> bool:
    return a == b or any(a in g and b in g for g in _WIRE_GROUPS)


def incompatibilities(
    reader: descriptor_pb2.FileDescriptorProto, writer: descriptor_pb2.FileDescriptorProto
) -> list[str]:
    """Why data written with ``writer`` cannot be read with ``reader`` (empty: it can)."""
    out: list[str] = []

    def problem(kind: str, where: str, what: str) -> None:
        out.append(f"{{errorType:'{kind}', description:'at {where}: {what}'}}")

    if reader.package != writer.package:
        problem("PACKAGE_CHANGED", "#", f"package {writer.package!r} became {reader.package!r}")
    rm, wm = _messages(reader), _messages(writer)
    for name, w in wm.items():
        r = rm.get(name)
        if r is None:
            if not w.options.map_entry:
                problem("MESSAGE_REMOVED", name, "message removed")
            continue
        rf = {f.number: f for f in r.field}
        wf = {f.number: f for f in w.field}
        for number, f in wf.items():
            g = rf.get(number)
            where = f"{name}.{f.name}"
            if g is None:
                if f.label == FD.LABEL_REQUIRED:
                    problem("REQUIRED_FIELD_REMOVED", where, "required field removed")
                continue
            kr, kw = _kind(g, rm), _kind(f, wm)
            if kr != kw:
                problem("FIELD_KIND_CHANGED", where, f"{kw} became {kr}")
            elif kw == "scalar" and not _same_wire(g.type, f.type):
                problem("FIELD_SCALAR_KIND_CHANGED", where, f"{_field_type(f)} became {_field_type(g)}")
            elif kw in ("message", "enum") and g.type_name != f.type_name:
                problem("FIELD_NAMED_TYPE_CHANGED", where, f"{f.type_name} became {g.type_name}")
        for number, g in rf.items():
            if number not in wf and g.label == FD.LABEL_REQUIRED:
                problem("REQUIRED_FIELD_ADDED", f"{name}.{g.name}", "required field added")
        moved: dict[int, int] = {}
        for number, g in rf.items():
            f = wf.get(number)
            if f is not None and g.HasField("oneof_index") and not g.proto3_optional and not (
                f.HasField("oneof_index") and not f.proto3_optional
            ):
                moved[g.oneof_index] = moved.get(g.oneof_index, 0) + 1
        for index, count in moved.items():
            if count > 1:
                problem("MULTIPLE_FIELDS_MOVED_TO_ONEOF", f"{name}.{r.oneof_decl[index].name}",
                        f"{count} existing fields moved into one oneof")  # fmt: skip
    return out
