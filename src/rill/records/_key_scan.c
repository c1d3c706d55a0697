/*
 * rill.records._key_scan: the log cleaner's reads of record keys and offsets, compiled.
 *
 * The pure-Python twin of every function here is in rill/records/key_scan.py, with the same
 * arguments, results and error messages; the tests run both on the same inputs.
 *
 * A record (the layout is in rill/records/_scan.c) is read up to the start of its value: its
 * length (a varint of at most 5 bytes, at least 6), attributes, timestamp delta (a varlong of at most
 * 10 bytes), offset delta, key length (negative: no key), key and value length (negative: a
 * tombstone). The rest of the record (value, headers) is skipped by its length.
 *
 * A key's digest is the key itself when shorter than 16 bytes, else its MD5 digest (RFC 1321,
 * computed here: the additive constants are made from sines at the module's start, as the RFC
 * defines them).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

#define DIGEST_SIZE 16
#define MIN_RECORD_BODY 6

/* Error messages, shared with the Python twin word for word. */
#define E_VARINT "record %lld: varint longer than %d bytes"
#define E_LENGTH "record %lld: invalid record length %lld"
#define E_TRUNCATED "record %lld: the records end inside it"
#define E_OVERRUN "record %lld: fields run past the record's length %lld"

/* ---- MD5 ------------------------------------------------------------------------------------ */

static uint32_t md5_t[64];
static const uint8_t md5_shift[4][4] = {{7, 12, 17, 22}, {5, 9, 14, 20}, {4, 11, 16, 23}, {6, 10, 15, 21}};

static void
md5_init_table(void)
{
    for (int i = 0; i < 64; i++)
        md5_t[i] = (uint32_t)floor(fabs(sin((double)(i + 1))) * 4294967296.0);
}

static inline uint32_t rotl(uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }

static void
md5_block(uint32_t h[4], const uint8_t *block)
{
    uint32_t m[16];
    for (int i = 0; i < 16; i++)
        m[i] = (uint32_t)block[4 * i] | (uint32_t)block[4 * i + 1] << 8 | (uint32_t)block[4 * i + 2] << 16
               | (uint32_t)block[4 * i + 3] << 24;
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3];
    for (int i = 0; i < 64; i++) {
        uint32_t f;
        int g, round = i >> 4;
        switch (round) {
        case 0: f = (b & c) | (~b & d); g = i; break;
        case 1: f = (b & d) | (c & ~d); g = (5 * i + 1) & 15; break;
        case 2: f = b ^ c ^ d; g = (3 * i + 5) & 15; break;
        default: f = c ^ (b | ~d); g = (7 * i) & 15; break;
        }
        uint32_t next = b + rotl(a + f + md5_t[i] + m[g], md5_shift[round][i & 3]);
        a = d;
        d = c;
        c = b;
        b = next;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
}

static void
md5(const uint8_t *data, Py_ssize_t n, uint8_t out[DIGEST_SIZE])
{
    uint32_t h[4] = {0x67452301u, 0xefcdab89u, 0x98badcfeu, 0x10325476u};
    Py_ssize_t full = n & ~(Py_ssize_t)63;
    for (Py_ssize_t p = 0; p < full; p += 64)
        md5_block(h, data + p);
    uint8_t tail[128];
    Py_ssize_t rest = n - full;
    memcpy(tail, data + full, (size_t)rest);
    tail[rest] = 0x80;
    Py_ssize_t tail_len = rest < 56 ? 64 : 128;
    memset(tail + rest + 1, 0, (size_t)(tail_len - rest - 1));
    uint64_t bits = (uint64_t)n << 3;
    for (int i = 0; i < 8; i++)
        tail[tail_len - 8 + i] = (uint8_t)(bits >> (8 * i));
    md5_block(h, tail);
    if (tail_len == 128)
        md5_block(h, tail + 64);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            out[4 * i + j] = (uint8_t)(h[i] >> (8 * j));
}

/* The map's key for a record key (a new reference). */
static PyObject *
digest_of(const uint8_t *key, Py_ssize_t n)
{
    if (n < DIGEST_SIZE)
        return PyBytes_FromStringAndSize((const char *)key, n);
    uint8_t out[DIGEST_SIZE];
    md5(key, n, out);
    return PyBytes_FromStringAndSize((const char *)out, DIGEST_SIZE);
}

/* ---- records -------------------------------------------------------------------------------- */

static int
fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    PyObject *msg = PyUnicode_FromFormatV(fmt, ap);
    va_end(ap);
    if (msg != NULL) {
        PyErr_SetObject(PyExc_ValueError, msg);
        Py_DECREF(msg);
    }
    return -1;
}

/* A zigzag varint of at most max_bytes (5: an int32, the high bits of a fifth byte dropped; 10: an
 * int64) from [*p, end). 1: read; 0: the input ends inside it; -1 (exception set): too long. */
static inline int
read_varint(const uint8_t **p, const uint8_t *end, int max_bytes, long long index, long long *out)
{
    const uint8_t *q = *p;
    if (q < end && *q < 0x80) {
        *out = (long long)(*q >> 1) ^ -(long long)(*q & 1);
        *p = q + 1;
        return 1;
    }
    uint64_t u = 0;
    for (int shift = 0; shift < 7 * max_bytes; shift += 7) {
        if (q >= end)
            return 0;
        uint8_t b = *q++;
        u |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            if (max_bytes == 5) {
                uint32_t w = (uint32_t)u;
                *out = (int32_t)((w >> 1) ^ (~(w & 1) + 1));
            } else {
                *out = (long long)((u >> 1) ^ (~(u & 1) + 1));
            }
            *p = q;
            return 1;
        }
    }
    fail(E_VARINT, index, max_bytes);
    return -1;
}

static inline int
field(const uint8_t **p, const uint8_t *rec_end, int max_bytes, long long index, long long length, long long *out)
{
    int r = read_varint(p, rec_end, max_bytes, index, out);
    if (r == 0)
        fail(E_OVERRUN, index, length);
    return r == 1 ? 0 : -1;
}

typedef struct {
    Py_ssize_t start, end; /* the record's bytes in the records section, its length field included */
    long long ts_delta, offset_delta;
    const uint8_t *key; /* NULL: no key */
    Py_ssize_t key_size;
    int tombstone;
} record_t;

/* Read record ``index`` at *p (the records section is buf[0:end - buf]); -1 with an exception set
 * when it is malformed. */
static int
next_record(const uint8_t **p, const uint8_t *buf, const uint8_t *end, long long index, record_t *r)
{
    const uint8_t *q = *p;
    long long length, v;
    int got = read_varint(&q, end, 5, index, &length);
    if (got < 0)
        return -1;
    if (got == 0)
        return fail(E_TRUNCATED, index);
    if (length < MIN_RECORD_BODY)
        return fail(E_LENGTH, index, length);
    if (length > end - q)
        return fail(E_TRUNCATED, index);
    const uint8_t *rec_end = q + length;
    r->start = *p - buf;
    r->end = rec_end - buf;
    q++; /* attributes */
    if (field(&q, rec_end, 10, index, length, &r->ts_delta) < 0 || field(&q, rec_end, 5, index, length, &r->offset_delta) < 0
        || field(&q, rec_end, 5, index, length, &v) < 0)
        return -1;
    if (v < 0) {
        r->key = NULL;
        r->key_size = 0;
    } else {
        if (v > rec_end - q)
            return fail(E_OVERRUN, index, length);
        r->key = q;
        r->key_size = (Py_ssize_t)v;
        q += v;
    }
    if (field(&q, rec_end, 5, index, length, &v) < 0)
        return -1;
    r->tombstone = v < 0;
    *p = rec_end;
    return 0;
}

static int
as_long_long(PyObject *o, long long *out)
{
    *out = PyLong_AsLongLong(o);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

/* ---- the module's functions ----------------------------------------------------------------- */

PyDoc_STRVAR(key_digest_doc,
"key_digest(key) -> bytes\n\n"
"The offset map's key for a record key: the key itself when shorter than 16 bytes, else its MD5 digest.");

static PyObject *
key_digest(PyObject *self, PyObject *key)
{
    Py_buffer view;
    if (PyObject_GetBuffer(key, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *result = digest_of((const uint8_t *)view.buf, view.len);
    PyBuffer_Release(&view);
    return result;
}

PyDoc_STRVAR(map_keys_doc,
"map_keys(entries, slots, data, count, base_offset, first_dirty) -> int\n\n"
"Put in the dict ``entries`` (key digest -> offset) the offset of each of the ``count`` records of\n"
"``data`` (a records section, decompressed, its first record at ``base_offset``) that has a key and\n"
"an offset at or after ``first_dirty``, when all their digests fit in ``slots`` entries. The number\n"
"of records put, or -1 when they would not fit (``entries`` unchanged). ValueError on a malformed\n"
"record (``entries`` unchanged).");

static PyObject *
map_keys(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6)
        return PyErr_Format(PyExc_TypeError, "map_keys takes 6 arguments, %zd given", nargs);
    PyObject *entries = args[0];
    if (!PyDict_Check(entries))
        return PyErr_Format(PyExc_TypeError, "map_keys takes a dict first");
    long long slots, count, base, first_dirty;
    if (as_long_long(args[1], &slots) < 0 || as_long_long(args[3], &count) < 0 || as_long_long(args[4], &base) < 0
        || as_long_long(args[5], &first_dirty) < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[2], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *buf = (const uint8_t *)view.buf, *end = buf + view.len, *p = buf;
    PyObject *result = NULL, *fresh = NULL;
    /* each record takes at least 7 bytes: more than that many records cannot be there */
    long long most = count < 0 ? 0 : (count < view.len / 7 + 1 ? count : view.len / 7 + 1);
    PyObject **digests = PyMem_Calloc((size_t)most + 1, sizeof(PyObject *));
    long long *offsets = PyMem_Malloc(((size_t)most + 1) * sizeof(long long));
    long long n = 0;
    if (digests == NULL || offsets == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (long long i = 0; i < count; i++) {
        record_t r;
        if (next_record(&p, buf, end, i, &r) < 0)
            goto done;
        long long offset = base + r.offset_delta;
        if (r.key == NULL || offset < first_dirty)
            continue;
        digests[n] = digest_of(r.key, r.key_size);
        if (digests[n] == NULL)
            goto done;
        offsets[n++] = offset;
    }
    if (PyDict_GET_SIZE(entries) + n > slots) { /* count the digests not in the map yet */
        fresh = PySet_New(NULL);
        if (fresh == NULL)
            goto done;
        for (long long j = 0; j < n; j++) {
            int in = PyDict_Contains(entries, digests[j]);
            if (in < 0 || (!in && PySet_Add(fresh, digests[j]) < 0))
                goto done;
        }
        if (PyDict_GET_SIZE(entries) + PySet_GET_SIZE(fresh) > slots) {
            result = PyLong_FromLong(-1);
            goto done;
        }
    }
    for (long long j = 0; j < n; j++) {
        PyObject *offset = PyLong_FromLongLong(offsets[j]);
        if (offset == NULL)
            goto done;
        int set = PyDict_SetItem(entries, digests[j], offset);
        Py_DECREF(offset);
        if (set < 0)
            goto done;
    }
    result = PyLong_FromLongLong(n);
done:
    if (digests != NULL)
        for (long long j = 0; j < n; j++)
            Py_XDECREF(digests[j]);
    PyMem_Free(digests);
    PyMem_Free(offsets);
    Py_XDECREF(fresh);
    PyBuffer_Release(&view);
    return result;
}

PyDoc_STRVAR(kept_records_doc,
"kept_records(entries, data, count, base_offset, map_end, retain_deletes)\n"
"    -> (kept, spans, tombstones, max_ts_delta)\n\n"
"Which of the ``count`` records of ``data`` (a records section, decompressed, its first record at\n"
"``base_offset``) a cleaning keeps: a record with a key whose offset is at or after ``map_end``, or\n"
"whose digest is not in the dict ``entries`` with a later offset, unless it is a tombstone and\n"
"``retain_deletes`` is false. ``kept``: how many; ``spans``: their bytes in ``data`` as a flat list\n"
"[start, end, start, end, ...], adjacent records in one span; ``tombstones``: whether a kept record\n"
"is a tombstone; ``max_ts_delta``: the largest timestamp delta of the kept records (None: none\n"
"kept). ValueError on a malformed record.");

static PyObject *
kept_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6)
        return PyErr_Format(PyExc_TypeError, "kept_records takes 6 arguments, %zd given", nargs);
    PyObject *entries = args[0];
    if (!PyDict_Check(entries))
        return PyErr_Format(PyExc_TypeError, "kept_records takes a dict first");
    long long count, base, map_end;
    if (as_long_long(args[2], &count) < 0 || as_long_long(args[3], &base) < 0 || as_long_long(args[4], &map_end) < 0)
        return NULL;
    int retain_deletes = PyObject_IsTrue(args[5]);
    if (retain_deletes < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *buf = (const uint8_t *)view.buf, *end = buf + view.len, *p = buf;
    PyObject *result = NULL, *spans = PyList_New(0);
    long long kept = 0, max_ts = LLONG_MIN;
    int tombstones = 0;
    Py_ssize_t span_start = -1, span_end = -1;
    if (spans == NULL)
        goto done;
    for (long long i = 0; i < count; i++) {
        record_t r;
        if (next_record(&p, buf, end, i, &r) < 0)
            goto done;
        if (r.key == NULL)
            continue;
        long long offset = base + r.offset_delta;
        if (offset < map_end) {
            if (r.tombstone && !retain_deletes)
                continue;
            PyObject *digest = digest_of(r.key, r.key_size);
            if (digest == NULL)
                goto done;
            PyObject *latest = PyDict_GetItemWithError(entries, digest); /* borrowed */
            Py_DECREF(digest);
            if (latest == NULL && PyErr_Occurred())
                goto done;
            if (latest != NULL) {
                long long at;
                if (as_long_long(latest, &at) < 0)
                    goto done;
                if (at > offset)
                    continue;
            }
        }
        kept++;
        tombstones |= r.tombstone;
        if (r.ts_delta > max_ts)
            max_ts = r.ts_delta;
        if (r.start == span_end) {
            span_end = r.end;
            continue;
        }
        if (span_start >= 0) {
            PyObject *s = PyLong_FromSsize_t(span_start), *e = PyLong_FromSsize_t(span_end);
            int bad = s == NULL || e == NULL || PyList_Append(spans, s) < 0 || PyList_Append(spans, e) < 0;
            Py_XDECREF(s);
            Py_XDECREF(e);
            if (bad)
                goto done;
        }
        span_start = r.start;
        span_end = r.end;
    }
    if (span_start >= 0) {
        PyObject *s = PyLong_FromSsize_t(span_start), *e = PyLong_FromSsize_t(span_end);
        int bad = s == NULL || e == NULL || PyList_Append(spans, s) < 0 || PyList_Append(spans, e) < 0;
        Py_XDECREF(s);
        Py_XDECREF(e);
        if (bad)
            goto done;
    }
    if (kept)
        result = Py_BuildValue("(LOOL)", kept, spans, tombstones ? Py_True : Py_False, max_ts);
    else
        result = Py_BuildValue("(LOOO)", kept, spans, Py_False, Py_None);
done:
    Py_XDECREF(spans);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"key_digest", key_digest, METH_O, key_digest_doc},
    {"map_keys", (PyCFunction)(void (*)(void))map_keys, METH_FASTCALL, map_keys_doc},
    {"kept_records", (PyCFunction)(void (*)(void))kept_records, METH_FASTCALL, kept_records_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "rill.records._key_scan",
    "The log cleaner's reads of record keys and offsets, compiled (twin: rill.records.key_scan).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__key_scan(void)
{
    md5_init_table();
    return PyModule_Create(&module);
}
