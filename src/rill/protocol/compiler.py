"""Compile message declarations into per-version decode/encode functions.

For one (message, version) the compiler writes Python source with every version test already resolved
(absent fields dropped, consecutive fixed-width fields read and written with one precompiled
``struct.Struct``, compact or classic lengths chosen), and ``exec``s it once. Nested structs become their
own functions.

Generated signatures:

    decode(buf: memoryview, pos: int) -> tuple[dict, int]
    encode(out: bytearray, chunks: list, body: dict) -> bytearray

An encoder appends to ``out``; when it meets a records field holding ``FileRegion``s it writes the length
prefix, moves ``out`` into ``chunks``, appends the regions and continues in a fresh bytearray, which it
returns. Decoded bodies contain every declared field (defaults for fields absent in the version or tagged
fields not sent). On encode, absent keys take their defaults and tagged fields are written only when their
encoding differs from the default's.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any

from rill.common import FileRegion
from rill.protocol import primitives as P
from rill.protocol.errors import ProtocolDecodeError, ProtocolEncodeError
from rill.protocol.schema import UNSET, Field, Message

Decoder = Callable[[memoryview, int], tuple[dict[str, Any], int]]
Encoder = Callable[[bytearray, list[Any], dict[str, Any]], bytearray]


# -- runtime helpers the generated code calls -------------------------------------------------------------


def _null_error(name: str, version: int) -> ProtocolEncodeError:
    return ProtocolEncodeError(f"field {name} is not nullable in version {version}")


def _write_string(out: bytearray, v: str | None, compact: bool) -> None:
    if compact:
        P.write_compact_nullable_string(out, v)
    else:
        P.write_nullable_string(out, v)


def _write_bytes(out: bytearray, v: Any, compact: bool) -> None:
    if compact:
        P.write_compact_nullable_bytes(out, v)
    else:
        P.write_nullable_bytes(out, v)


def _write_records(out: bytearray, chunks: list[Any] | None, v: Any, compact: bool) -> bytearray:
    if isinstance(v, FileRegion):
        regions: list[FileRegion] = [v]
    elif isinstance(v, list):
        regions = v
    else:
        _write_bytes(out, v, compact)
        return out
    if chunks is None:
        raise ProtocolEncodeError("file regions cannot be written here (tagged field or request)")
    total = 0
    for r in regions:
        if not isinstance(r, FileRegion):
            raise ProtocolEncodeError(f"records list holds {type(r).__name__}, not FileRegion")
        total += r.length
    if compact:
        P.write_uvarint(out, total + 1)
    else:
        out += P.INT32.pack(total)
    chunks.append(out)
    chunks.extend(regions)
    return bytearray()


def _write_length(out: bytearray, n: int, compact: bool) -> None:
    if compact:
        P.write_uvarint(out, n + 1)
    else:
        out += P.INT32.pack(n)


def _tag_span(buf: memoryview, p: int, size: int) -> int:
    q = p + size
    if q > len(buf):
        raise ProtocolDecodeError(f"tagged field of {size} bytes at byte {p} runs past the end")
    return q


_NAMESPACE_BASE: dict[str, Any] = {
    "_uv": P.read_uvarint,
    "_uvb": P.uvarint_bytes,
    "_ws": _write_string,
    "_wb": _write_bytes,
    "_wr": _write_records,
    "_wl": _write_length,
    "_ts": _tag_span,
    "_ub": P.uuid_bytes,
    "_UUID": uuid.UUID,
    "_ZU": P.ZERO_UUID,
    "_PDE": ProtocolDecodeError,
    "_null": _null_error,
    "_U": UNSET,
    "_unpack": struct.unpack_from,
    "_pack": struct.pack,
}

_FIXED: dict[str, tuple[str, int]] = {**P.FIXED_FORMATS, "uuid": ("16s", 16)}


def default_source(f: Field) -> str:
    """Python source of a field's default value (a fresh object each time it is evaluated)."""
    d = f.default
    if f.is_array:
        return "None" if d is None else "[]"
    if f.is_struct:
        if d is None:
            return "None"
        return "{" + ", ".join(f"{sf.key!r}: {default_source(sf)}" for sf in f.fields) + "}"
    t = f.type
    if t == "records":
        return "None"
    if d is None:
        return "None"
    if t == "uuid":
        return "_ZU"
    if t == "bytes":
        return "b''"
    if d is UNSET:
        return {"string": "''", "bool": "False", "float64": "0.0"}.get(t, "0")
    if t == "bool":
        return "True" if d is True or d == "true" else "False"
    if t == "string":
        return repr(str(d))
    if t == "float64":
        return repr(float(str(d)))
    return repr(int(str(d), 0))


def _encode_default(f: Field) -> str:
    """Source of the value used on encode when the key is absent (immutable where possible)."""
    if f.is_array:
        return "None" if f.default is None else "()"
    return default_source(f)


class _Gen:
    """Accumulates the source of one (message, version) compilation unit."""

    def __init__(self, version: int, flexible: bool) -> None:
        self.version = version
        self.flexible = flexible
        self.lines: list[str] = []
        self.post: list[str] = []
        self.ns: dict[str, Any] = dict(_NAMESPACE_BASE)
        self.counter = 0
        self.structs: dict[str, str] = {}

    def name(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def struct(self, fmt: str) -> str:
        key = self.structs.get(fmt)
        if key is None:
            key = self.structs[fmt] = f"_S{len(self.structs)}"
            self.ns[key] = struct.Struct(">" + fmt)
        return key

    # -- decoding ----------------------------------------------------------------------------------------

    def decoder(self, fields: tuple[Field, ...]) -> str:
        fname = self.name("_d")
        v, flex = self.version, self.flexible
        body: list[str] = []
        present = [f for f in fields if v in f.versions]
        regular = [f for f in present if not f.is_tagged(v)]
        tagged = sorted((f for f in present if f.is_tagged(v)), key=lambda f: f.tag or 0)
        local: dict[str, str] = {}
        i = 0
        while i < len(regular):
            group: list[Field] = []
            while i < len(regular) and not regular[i].is_array and regular[i].type in _FIXED:
                group.append(regular[i])
                i += 1
            if group:
                fmt = "".join(_FIXED[f.type][0] for f in group)
                size = sum(_FIXED[f.type][1] for f in group)
                names = [self.name("v") for _ in group]
                body.append(f"{', '.join(names)}, = {self.struct(fmt)}.unpack_from(buf, p)")
                body.append(f"p += {size}")
                for f, n in zip(group, names, strict=True):
                    if f.type == "uuid":
                        body.append(f"{n} = _UUID(bytes={n})")
                    local[f.key] = n
                continue
            f = regular[i]
            i += 1
            n = self.name("v")
            body.extend(self.decode_field(f, n))
            local[f.key] = n
        if flex:
            for f in tagged:
                n = self.name("v")
                local[f.key] = n
                body.append(f"{n} = {default_source(f)}")
            cnt, tag, tsize = self.name("n"), self.name("t"), self.name("s")
            end = self.name("q")
            loop = [
                f"{cnt}, p = _uv(buf, p)",
                f"for _ in range({cnt}):",
                f"    {tag}, p = _uv(buf, p)",
                f"    {tsize}, p = _uv(buf, p)",
                f"    {end} = _ts(buf, p, {tsize})",
            ]
            kw = "if"
            for f in tagged:
                loop.append(f"    {kw} {tag} == {f.tag}:")
                loop.extend("        " + line for line in self.decode_field(f, local[f.key]))
                loop.append(f"        if p > {end}:")
                loop.append(f"            raise _PDE('tagged field {f.name} overruns its size')")
                kw = "elif"
            loop.append(f"    p = {end}")
            # the common case, an empty tagged-field section, costs one byte test
            body.append("if buf[p] == 0:")
            body.append("    p += 1")
            body.append("else:")
            body.extend("    " + line for line in loop)
        items = ", ".join(f"{f.key!r}: {local.get(f.key) or default_source(f)}" for f in fields)
        body.append(f"return {{{items}}}, p")
        self.lines.append(f"def {fname}(buf, p):")
        self.lines.extend("    " + line for line in body)
        self.lines.append("")
        return fname

    def decode_field(self, f: Field, n: str) -> list[str]:
        nullable = f.is_nullable(self.version)
        out: list[str] = []
        if f.is_array:
            cnt = self.name("n")
            out.extend(self.read_length(cnt, "i"))
            out.append(f"if {cnt} < 0:")
            out.append(f"    if {cnt} != -1:")
            out.append(f"        raise _PDE('negative length in {f.name}')")
            out.append(f"    {n} = None" if nullable else f"    raise _PDE('null in non-nullable {f.name}')")
            out.append(f"elif {cnt} > len(buf) - p:")
            out.append(f"    raise _PDE('{f.name}: array of ' + str({cnt}) + ' elements cannot fit')")
            out.append("else:")
            et = f.element_type
            if et in _FIXED and et != "uuid":
                fmt, size = _FIXED[et]
                out.append(f"    {n} = list(_unpack(f'>{{{cnt}}}{fmt}', buf, p))")
                out.append(f"    p += {cnt} * {size}")
            else:
                elem = self.name("e")
                out.append(f"    {n} = []")
                out.append(f"    for _ in range({cnt}):")
                out.extend("        " + line for line in self.decode_element(f, elem))
                out.append(f"        {n}.append({elem})")
            return out
        if f.is_struct:
            sub = self.decoder(f.fields)
            if nullable:
                out.append("if buf[p] == 255:")
                out.append(f"    {n} = None")
                out.append("    p += 1")
                out.append("else:")
                out.append(f"    {n}, p = {sub}(buf, p + 1)")
            else:
                out.append(f"{n}, p = {sub}(buf, p)")
            return out
        t = f.type
        if t in _FIXED:
            fmt, size = _FIXED[t]
            out.append(f"{n}, = {self.struct(fmt)}.unpack_from(buf, p)")
            out.append(f"p += {size}")
            if t == "uuid":
                out.append(f"{n} = _UUID(bytes={n})")
            return out
        return out + self.read_sized(f, t, n, nullable)

    def decode_element(self, f: Field, n: str) -> list[str]:
        et = f.element_type
        if f.is_struct:
            return [f"{n}, p = {self.decoder(f.fields)}(buf, p)"]
        if et == "uuid":
            return [
                "if len(buf) < p + 16:",
                "    raise _PDE('short uuid')",
                f"{n} = _UUID(bytes=bytes(buf[p:p + 16]))",
                "p += 16",
            ]
        return self.read_sized(f, et, n, False)

    def read_length(self, n: str, width: str) -> list[str]:
        """Lines that read a length into ``n`` (-1 for null): compact, or int16 ("h") / int32 ("i")."""
        if self.flexible:
            return [f"{n} = buf[p]", f"if {n} < 128:", "    p += 1", "else:", f"    {n}, p = _uv(buf, p)",
                    f"{n} -= 1"]
        return [f"{n}, = {self.struct(width)}.unpack_from(buf, p)", f"p += {2 if width == 'h' else 4}"]

    def read_sized(self, f: Field, t: str, n: str, nullable: bool) -> list[str]:
        """Lines that read a string, bytes or records value into ``n``."""
        ln, q = self.name("n"), self.name("q")
        value = {"string": f"str(buf[p:{q}], 'utf-8')", "bytes": f"bytes(buf[p:{q}])"}.get(t, f"buf[p:{q}]")
        null = f"{n} = None" if nullable else f"raise _PDE('null in non-nullable {f.name}')"
        return [
            *self.read_length(ln, "h" if t == "string" else "i"),
            f"if {ln} < 0:",
            f"    if {ln} != -1:",
            f"        raise _PDE('negative length in {f.name}')",
            f"    {null}",
            "else:",
            f"    {q} = p + {ln}",
            f"    if {q} > len(buf):",
            f"        raise _PDE('{f.name} runs past the end of the frame')",
            f"    {n} = {value}",
            f"    p = {q}",
        ]

    # -- encoding ----------------------------------------------------------------------------------------

    def encoder(self, fields: tuple[Field, ...]) -> str:
        fname = self.name("_e")
        v, flex = self.version, self.flexible
        body = ["g = d.get"]
        present = [f for f in fields if v in f.versions]
        regular = [f for f in present if not f.is_tagged(v)]
        tagged = sorted((f for f in present if f.is_tagged(v)), key=lambda f: f.tag or 0)
        i = 0
        while i < len(regular):
            group: list[Field] = []
            while i < len(regular) and not regular[i].is_array and regular[i].type in _FIXED:
                group.append(regular[i])
                i += 1
            if group:
                fmt = "".join(_FIXED[f.type][0] for f in group)
                args = []
                for f in group:
                    a = f"g({f.key!r}, {_encode_default(f)})"
                    args.append(f"_ub({a})" if f.type == "uuid" else a)
                body.append(f"out += {self.struct(fmt)}.pack({', '.join(args)})")
                continue
            f = regular[i]
            i += 1
            n = self.name("v")
            body.append(f"{n} = g({f.key!r}, {_encode_default(f)})")
            body.extend(self.encode_field(f, n, "out", "ch"))
        if flex:
            if not tagged:
                body.append("out.append(0)")
            else:
                tg = self.name("tg")
                body.append(f"{tg} = []")
                for f in tagged:
                    tf = self.tagged_encoder(f)
                    n = self.name("v")
                    body.append(f"{n} = g({f.key!r}, _U)")
                    body.append(f"if {n} is not _U:")
                    body.append(f"    {n} = {tf}({n})")
                    body.append(f"    if {n} != {tf}_default:")
                    body.append(f"        {tg}.append(({f.tag}, {n}))")
                body.append(f"if not {tg}:")
                body.append("    out.append(0)")
                body.append("else:")
                body.append(f"    out += _uvb(len({tg}))")
                body.append(f"    for t, b in {tg}:")
                body.append("        out += _uvb(t)")
                body.append("        out += _uvb(len(b))")
                body.append("        out += b")
        body.append("return out")
        self.lines.append(f"def {fname}(out, ch, d):")
        self.lines.extend("    " + line for line in body)
        self.lines.append("")
        return fname

    def tagged_encoder(self, f: Field) -> str:
        fname = self.name("_tf")
        n = self.name("v")
        body = [
            f"{n} = value",
            "out = bytearray()",
            *self.encode_field(f, n, "out", "None"),
            "return bytes(out)",
        ]
        self.lines.append(f"def {fname}(value):")
        self.lines.extend("    " + line for line in body)
        self.lines.append("")
        self.post.append(f"{fname}_default = {fname}({default_source(f)})")
        return fname

    def encode_field(self, f: Field, n: str, out: str, ch: str) -> list[str]:
        v, flex = self.version, self.flexible
        nullable = f.is_nullable(v)
        lines: list[str] = []
        if not nullable and f.type not in _FIXED:
            lines += [f"if {n} is None:", f"    raise _null({f.name!r}, {v})"]
        if f.is_array:
            et = f.element_type
            ind = "    " if nullable else ""
            if nullable:
                null_marker = b"\x00" if flex else b"\xff\xff\xff\xff"
                lines.append(f"if {n} is None:")
                lines.append(f"    {out} += {null_marker!r}")
                lines.append("else:")
            lines.append(f"{ind}_wl({out}, len({n}), {flex})")
            if et in _FIXED and et != "uuid":
                lines.append(f"{ind}{out} += _pack(f'>{{len({n})}}{_FIXED[et][0]}', *{n})")
            elif f.is_struct:
                sub = self.encoder(f.fields)
                e = self.name("e")
                lines.append(f"{ind}for {e} in {n}:")
                lines.append(f"{ind}    {out} = {sub}({out}, {ch}, {e})")
            elif et == "uuid":
                e = self.name("e")
                lines.append(f"{ind}for {e} in {n}:")
                lines.append(f"{ind}    {out} += _ub({e})")
            else:
                e = self.name("e")
                lines.append(f"{ind}for {e} in {n}:")
                lines.append(f"{ind}    if {e} is None:")
                lines.append(f"{ind}        raise _null({f.name + '[]'!r}, {v})")
                if et == "string":
                    lines.append(f"{ind}    _ws({out}, {e}, {flex})")
                else:
                    lines.append(f"{ind}    _wb({out}, {e}, {flex})")
            return lines
        if f.is_struct:
            sub = self.encoder(f.fields)
            if nullable:
                lines.append(f"if {n} is None:")
                lines.append(f"    {out}.append(255)")
                lines.append("else:")
                lines.append(f"    {out}.append(1)")
                lines.append(f"    {out} = {sub}({out}, {ch}, {n})")
            else:
                lines.append(f"{out} = {sub}({out}, {ch}, {n})")
            return lines
        t = f.type
        if t in _FIXED:
            fmt = _FIXED[t][0]
            arg = f"_ub({n})" if t == "uuid" else n
            lines.append(f"{out} += {self.struct(fmt)}.pack({arg})")
        elif t == "string":
            lines.append(f"_ws({out}, {n}, {flex})")
        elif t == "bytes":
            lines.append(f"_wb({out}, {n}, {flex})")
        else:
            lines.append(f"{out} = _wr({out}, {ch}, {n}, {flex})")
        return lines

    def build(self) -> dict[str, Any]:
        source = "\n".join(self.lines + self.post) + "\n"
        exec(compile(source, f"<rill.protocol {self.version}>", "exec"), self.ns)
        self.ns["__source__"] = source
        return self.ns


def compile_decoder(msg: Message, version: int) -> Decoder:
    gen = _Gen(version, msg.is_flexible(version))
    fname = gen.decoder(msg.fields)
    fn: Decoder = gen.build()[fname]
    return fn


def compile_encoder(msg: Message, version: int) -> Encoder:
    gen = _Gen(version, msg.is_flexible(version))
    fname = gen.encoder(msg.fields)
    fn: Encoder = gen.build()[fname]
    return fn


def generated_source(msg: Message, version: int, encode: bool) -> str:
    """The generated Python source, for debugging and review."""
    gen = _Gen(version, msg.is_flexible(version))
    if encode:
        gen.encoder(msg.fields)
    else:
        gen.decoder(msg.fields)
    return "\n".join(gen.lines + gen.post)
