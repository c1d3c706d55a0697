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
 * A key's digest is the key itself when shorter than 16 bytes, else its MD5 digest (RFC 1321, in
 * _key_scan_md5.h). The offset map's table, KeyTable, is in _key_scan_table.h.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

#include "_key_scan_md5.h"
#include "_key_scan_table.h"

#define MIN_RECORD_BODY 6

/* Error messages, shared with the Python twin word for word. */
#define E_VARINT "record %lld: varint longer than %d bytes"
#define E_LENGTH "record %lld: invalid record length %lld"
#define E_TRUNCATED "record %lld: the records end inside it"
#define E_OVERRUN "record %lld: fields run past the record's length %lld"

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
    PyObject *result;
    if (view.len < DIGEST_SIZE) {
        result = PyBytes_FromStringAndSize(view.buf, view.len);
    } else {
        digest_t d;
        md5((const uint8_t *)view.buf, view.len, d.bytes);
        result = PyBytes_FromStringAndSize((const char *)d.bytes, DIGEST_SIZE);
    }
    PyBuffer_Release(&view);
    return result;
}

static int
compare_digests(const void *a, const void *b)
{
    return memcmp(a, b, sizeof(digest_t));
}

PyDoc_STRVAR(map_keys_doc,
"map_keys(table, data, count, base_offset, first_dirty) -> int\n\n"
"Put in ``table`` (key digest -> offset) the offset of each of the ``count`` records of ``data`` (a\n"
"records section, decompressed, its first record at ``base_offset``) that has a key and an offset at\n"
"or after ``first_dirty`` (and 0), when all their digests fit in the table's ``slots``. The number of records\n"
"put, or -1 when they would not fit (the table unchanged). ValueError on a malformed record (the table\n"
"unchanged).");

static PyObject *
map_keys(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5)
        return PyErr_Format(PyExc_TypeError, "map_keys takes 5 arguments, %zd given", nargs);
    KeyTable *t;
    long long count, base, first_dirty;
    if (table_arg(args[0], "map_keys", &t) < 0 || as_long_long(args[2], &count) < 0
        || as_long_long(args[3], &base) < 0 || as_long_long(args[4], &first_dirty) < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *buf = (const uint8_t *)view.buf, *end = buf + view.len, *p = buf;
    PyObject *result = NULL;
    /* a record takes at least 7 bytes: no more than that many can be there */
    long long most = count < 0 ? 0 : (count < view.len / 7 + 1 ? count : view.len / 7 + 1);
    digest_t *digests = PyMem_Malloc(((size_t)most + 1) * sizeof(digest_t));
    int64_t *offsets = PyMem_Malloc(((size_t)most + 1) * sizeof(int64_t));
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
        if (r.key == NULL || offset < first_dirty || offset < 0)
            continue;
        digest_into(r.key, r.key_size, &digests[n]);
        offsets[n++] = offset;
    }
    if (t->size + n > t->slots) { /* count the distinct digests not in the table yet */
        digest_t *fresh = PyMem_Malloc(((size_t)n + 1) * sizeof(digest_t));
        if (fresh == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        long long m = 0, distinct = 0;
        for (long long j = 0; j < n; j++)
            if (find(t, &digests[j])->offset_1 == 0)
                fresh[m++] = digests[j];
        qsort(fresh, (size_t)m, sizeof(digest_t), compare_digests);
        for (long long j = 0; j < m; j++)
            distinct += j == 0 || memcmp(&fresh[j], &fresh[j - 1], sizeof(digest_t)) != 0;
        PyMem_Free(fresh);
        if (t->size + distinct > t->slots) {
            result = PyLong_FromLong(-1);
            goto done;
        }
    }
    if (reserve(t, (Py_ssize_t)n) < 0) /* the table unchanged: the puts below cannot fail */
        goto done;
    for (long long j = 0; j < n; j++)
        if (put(t, &digests[j], offsets[j]) < 0)
            goto done;
    result = PyLong_FromLongLong(n);
done:
    PyMem_Free(digests);
    PyMem_Free(offsets);
    PyBuffer_Release(&view);
    return result;
}

static int
append_span(PyObject *spans, Py_ssize_t start, Py_ssize_t end)
{
    PyObject *s = PyLong_FromSsize_t(start), *e = PyLong_FromSsize_t(end);
    int bad = s == NULL || e == NULL || PyList_Append(spans, s) < 0 || PyList_Append(spans, e) < 0;
    Py_XDECREF(s);
    Py_XDECREF(e);
    return bad ? -1 : 0;
}

PyDoc_STRVAR(kept_records_doc,
"kept_records(table, data, count, base_offset, map_end, retain_deletes)\n"
"    -> (kept, spans, tombstones, max_ts_delta)\n\n"
"Which of the ``count`` records of ``data`` (a records section, decompressed, its first record at\n"
"``base_offset``) a cleaning keeps: a record with a key whose offset is at or after ``map_end``, or\n"
"whose digest ``table`` does not hold with a later offset, unless it is a tombstone and\n"
"``retain_deletes`` is false. ``kept``: how many; ``spans``: their bytes in ``data`` as a flat list\n"
"[start, end, start, end, ...], adjacent records in one span; ``tombstones``: whether a kept record\n"
"is a tombstone; ``max_ts_delta``: the largest timestamp delta of the kept records (None: none\n"
"kept). ValueError on a malformed record.");

static PyObject *
kept_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6)
        return PyErr_Format(PyExc_TypeError, "kept_records takes 6 arguments, %zd given", nargs);
    KeyTable *t;
    long long count, base, map_end;
    if (table_arg(args[0], "kept_records", &t) < 0 || as_long_long(args[2], &count) < 0
        || as_long_long(args[3], &base) < 0 || as_long_long(args[4], &map_end) < 0)
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
            digest_t d;
            digest_into(r.key, r.key_size, &d);
            if (get(t, &d) > offset)
                continue;
        }
        kept++;
        tombstones |= r.tombstone;
        if (r.ts_delta > max_ts)
            max_ts = r.ts_delta;
        if (r.start == span_end) {
            span_end = r.end;
            continue;
        }
        if (span_start >= 0 && append_span(spans, span_start, span_end) < 0)
            goto done;
        span_start = r.start;
        span_end = r.end;
    }
    if (span_start >= 0 && append_span(spans, span_start, span_end) < 0)
        goto done;
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
    PyObject *os = PyImport_ImportModule("os");
    if (os == NULL)
        return NULL;
    PyObject *seed = PyObject_CallMethod(os, "urandom", "i", (int)sizeof(hash_seed));
    Py_DECREF(os);
    if (seed == NULL)
        return NULL;
    if (!PyBytes_Check(seed) || PyBytes_GET_SIZE(seed) != (Py_ssize_t)sizeof(hash_seed)) {
        Py_DECREF(seed);
        PyErr_SetString(PyExc_RuntimeError, "os.urandom gave no seed");
        return NULL;
    }
    memcpy(hash_seed, PyBytes_AS_STRING(seed), sizeof(hash_seed));
    Py_DECREF(seed);
    if (PyType_Ready(&KeyTableType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "KeyTable", (PyObject *)&KeyTableType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
