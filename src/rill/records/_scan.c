/*
 * rill.records._scan: the record-level checks of a v2 record batch, compiled.
 *
 * The pure-Python twin of every function here is in rill/records/scan.py, with the same
 * arguments, results and error messages; the tests run both on the same inputs.
 *
 * A record, inside the (decompressed) records section of a batch; varints are zigzag LEB128,
 * at most 5 bytes for a varint and 10 for a varlong:
 *
 *     length           varint    bytes of the record after this field (at least 6)
 *     attributes       int8
 *     timestampDelta   varlong   timestamp - batch baseTimestamp
 *     offsetDelta      varint    offset - batch baseOffset
 *     keyLength        varint    negative: null key
 *     key              bytes
 *     valueLength      varint    negative: null value
 *     value            bytes
 *     headersCount     varint    not negative
 *     headers          keyLength varint (not negative), key, valueLength varint (negative: null), value
 *
 * The batch header (61 bytes, big-endian) is laid out in rill/records/batch.py.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>

#define HEADER_SIZE 61
#define LOG_OVERHEAD 12
#define ATTRIBUTES_POS 21
#define COMPRESSION_MASK 0x07
#define NOT_FROM_CLIENTS 0x28 /* control batch, LogAppendTime */
#define MAX_COMPRESSION 4
#define MIN_RECORD_BODY 6

static PyObject *crc32c_fn; /* crc32c_rs.crc32c */

/* One scan over complete records, and what it found. */
typedef struct {
    Py_ssize_t consumed;   /* bytes of complete records read */
    long long index;       /* records read so far, over all calls */
    long long min_ts;      /* smallest timestamp delta seen (LLONG_MAX: none) */
    long long max_ts;      /* largest (LLONG_MIN: none) */
    long long null_key;    /* index of the first record with a null key, -1: none */
    long long bad_offset;  /* index of the first record whose offset delta is not its index, -1: none */
    int check_time;        /* look for a CreateTime outside [low, high]? */
    long long base_ts, low, high;
    long long bad_time;       /* index of the first record whose timestamp lies outside, -1: none */
    long long bad_time_delta; /* its timestamp delta */
    PyObject *flagged;        /* NULL, or a list: (index, null key, bad offset, bad time, time delta) of
                               * every record with a null key, an offset delta other than its index or
                               * a timestamp outside [low, high] */
} scan_state;

/* Error messages, shared with the Python twin word for word. */
#define E_VARINT "record %lld: varint longer than %d bytes"
#define E_LENGTH "record %lld: invalid record length %lld"
#define E_OVERRUN "record %lld: fields run past the record's length %lld"
#define E_HEADERS "record %lld: invalid number of headers %lld"
#define E_HEADER_KEY "record %lld: invalid header key length %lld"
#define E_SIZE "record %lld: fields end at byte %lld of the record, its length says %lld"

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

/* Read a zigzag varint of at most max_bytes (5: an int32, whose fifth byte's high bits are dropped
 * as Kafka drops them; 10: an int64) from [*p, end). Returns 1 on success, 0 when the input ends
 * inside it, -1 (exception set) when all max_bytes bytes have the continuation bit. */
static inline int
read_varint(const uint8_t **p, const uint8_t *end, int max_bytes, long long index, long long *out)
{
    const uint8_t *q = *p;
    if (q < end && *q < 0x80) { /* the common one-byte case */
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

/* A varint inside a record: running out of the record is an error there. */
static inline int
field_varint(const uint8_t **p, const uint8_t *rec_end, int max_bytes, long long index, long long length,
             long long *out)
{
    int r = read_varint(p, rec_end, max_bytes, index, out);
    if (r == 0)
        fail(E_OVERRUN, index, length);
    return r == 1 ? 0 : -1;
}

/* Scan complete records of buf[0:n] while st->index < count. Stops at the first record that is not
 * whole in the buffer (st->consumed says where). Returns -1 with an exception set on a malformed
 * record. */
static int
scan(const uint8_t *buf, Py_ssize_t n, long long count, scan_state *st)
{
    const uint8_t *p = buf, *end = buf + n;
    while (st->index < count) {
        const uint8_t *q = p;
        long long length, v;
        int r = read_varint(&q, end, 5, st->index, &length);
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        if (length < MIN_RECORD_BODY)
            return fail(E_LENGTH, st->index, length);
        if (length > end - q)
            break;
        const uint8_t *rec = q, *rec_end = q + length;
        long long i = st->index, ts_delta;
        int late = 0, misplaced, keyless;
        q++; /* attributes */
        if (field_varint(&q, rec_end, 10, i, length, &ts_delta) < 0)
            return -1;
        if (ts_delta < st->min_ts)
            st->min_ts = ts_delta;
        if (ts_delta > st->max_ts)
            st->max_ts = ts_delta;
        if (st->check_time && (st->bad_time < 0 || st->flagged != NULL)) {
            /* base + delta is the record's timestamp; -1 (none) passes; past int64 is outside */
            long long ts;
            late = __builtin_add_overflow(st->base_ts, ts_delta, &ts) || (ts != -1 && (ts < st->low || ts > st->high));
            if (late && st->bad_time < 0) {
                st->bad_time = i;
                st->bad_time_delta = ts_delta;
            }
        }
        if (field_varint(&q, rec_end, 5, i, length, &v) < 0)
            return -1;
        misplaced = v != i;
        if (misplaced && st->bad_offset < 0)
            st->bad_offset = i;
        if (field_varint(&q, rec_end, 5, i, length, &v) < 0) /* key */
            return -1;
        keyless = v < 0;
        if (keyless) {
            if (st->null_key < 0)
                st->null_key = i;
        } else if (v > rec_end - q) {
            return fail(E_OVERRUN, i, length);
        } else {
            q += v;
        }
        if (field_varint(&q, rec_end, 5, i, length, &v) < 0) /* value */
            return -1;
        if (v >= 0) {
            if (v > rec_end - q)
                return fail(E_OVERRUN, i, length);
            q += v;
        }
        long long headers;
        if (field_varint(&q, rec_end, 5, i, length, &headers) < 0)
            return -1;
        if (headers < 0)
            return fail(E_HEADERS, i, headers);
        for (long long h = 0; h < headers; h++) {
            if (field_varint(&q, rec_end, 5, i, length, &v) < 0)
                return -1;
            if (v < 0)
                return fail(E_HEADER_KEY, i, v);
            if (v > rec_end - q)
                return fail(E_OVERRUN, i, length);
            q += v;
            if (field_varint(&q, rec_end, 5, i, length, &v) < 0)
                return -1;
            if (v >= 0) {
                if (v > rec_end - q)
                    return fail(E_OVERRUN, i, length);
                q += v;
            }
        }
        if (q != rec_end)
            return fail(E_SIZE, i, (long long)(q - rec), length);
        if (st->flagged != NULL && (keyless || misplaced || late)) {
            PyObject *item = Py_BuildValue("(LiiiL)", i, keyless, misplaced, late, ts_delta);
            if (item == NULL)
                return -1;
            int appended = PyList_Append(st->flagged, item);
            Py_DECREF(item);
            if (appended < 0)
                return -1;
        }
        p = rec_end;
        st->index++;
    }
    st->consumed = p - buf;
    return 0;
}

static void
scan_init(scan_state *st, long long index)
{
    st->consumed = 0;
    st->index = index;
    st->min_ts = LLONG_MAX;
    st->max_ts = LLONG_MIN;
    st->null_key = -1;
    st->bad_offset = -1;
    st->check_time = 0;
    st->base_ts = st->low = st->high = 0;
    st->bad_time = -1;
    st->bad_time_delta = 0;
    st->flagged = NULL;
}

PyDoc_STRVAR(scan_records_doc,
"scan_records(data, count, index[, base_ts, low, high])\n"
"    -> (consumed, index, min_ts_delta, max_ts_delta, null_key, bad_offset, bad_time, bad_time_delta)\n\n"
"Check the complete records at the start of ``data`` (a records section, decompressed), numbering\n"
"them from ``index`` and stopping at record ``count`` or at the first record not whole in ``data``.\n"
"Returns the bytes read, the next record's number, the smallest and largest timestamp delta\n"
"(None when no record was read), the number of the first record with a null key and of the first\n"
"whose offset delta is not its number (-1: none). Given the batch's ``base_ts`` and the bounds\n"
"``low`` and ``high``, also the number of the first record whose timestamp (base_ts + delta; -1\n"
"passes, a sum past int64 does not) lies outside [low, high], and its delta (-1 and 0: none).\n"
"Raises ValueError on a malformed record.");

static PyObject *
scan_records_into(PyObject *const *args, Py_ssize_t nargs, PyObject *flagged)
{
    if (nargs != 3 && nargs != 6)
        return PyErr_Format(PyExc_TypeError, "scan_records takes 3 or 6 arguments, %zd given", nargs);
    long long ints[5]; /* count, index, base_ts, low, high */
    for (Py_ssize_t a = 1; a < nargs; a++) {
        ints[a - 1] = PyLong_AsLongLong(args[a]);
        if (ints[a - 1] == -1 && PyErr_Occurred())
            return NULL;
    }
    long long count = ints[0], index = ints[1];
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    scan_state st;
    scan_init(&st, index);
    st.flagged = flagged;
    if (nargs == 6) {
        st.check_time = 1;
        st.base_ts = ints[2];
        st.low = ints[3];
        st.high = ints[4];
    }
    int r = scan((const uint8_t *)view.buf, view.len, count, &st);
    PyBuffer_Release(&view);
    if (r < 0)
        return NULL;
    if (st.index == index)
        return Py_BuildValue("(nLOOLLLL)", st.consumed, st.index, Py_None, Py_None, st.null_key, st.bad_offset,
                             st.bad_time, st.bad_time_delta);
    return Py_BuildValue("(nLLLLLLL)", st.consumed, st.index, st.min_ts, st.max_ts, st.null_key, st.bad_offset,
                         st.bad_time, st.bad_time_delta);
}

static PyObject *
scan_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return scan_records_into(args, nargs, NULL);
}

PyDoc_STRVAR(flag_records_doc,
"flag_records(flagged, data, count, index[, base_ts, low, high]) -> what scan_records returns\n\n"
"``scan_records``, which also appends to the list ``flagged`` one tuple (index, null key, offset\n"
"delta other than its index, timestamp outside [low, high], timestamp delta) for every record\n"
"read that has one of those (flags 0 or 1).");

static PyObject *
flag_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || !PyList_Check(args[0]))
        return PyErr_Format(PyExc_TypeError, "flag_records takes a list first");
    return scan_records_into(args + 1, nargs - 1, args[0]);
}

static inline int16_t be16(const uint8_t *p) { return (int16_t)(((uint16_t)p[0] << 8) | p[1]); }
static inline int32_t be32(const uint8_t *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}
static inline int64_t be64(const uint8_t *p) { return (int64_t)(((uint64_t)(uint32_t)be32(p) << 32) | (uint32_t)be32(p + 4)); }

/* crc32c_rs.crc32c over buf[ATTRIBUTES_POS:size] equals the header's CRC? -1 with an exception set
 * when the call fails. */
static int
crc_matches(const uint8_t *buf, Py_ssize_t size, uint32_t crc)
{
    PyObject *mv = PyMemoryView_FromMemory((char *)buf + ATTRIBUTES_POS, size - ATTRIBUTES_POS, PyBUF_READ);
    if (mv == NULL)
        return -1;
    PyObject *got = PyObject_CallOneArg(crc32c_fn, mv);
    Py_DECREF(mv);
    if (got == NULL)
        return -1;
    unsigned long value = PyLong_AsUnsignedLong(got);
    Py_DECREF(got);
    if (value == (unsigned long)-1 && PyErr_Occurred())
        return -1;
    return value == crc;
}

PyDoc_STRVAR(check_batch_doc,
"check_batch(view, max_bytes, require_keys) -> tuple | None\n\n"
"The 13 header fields (HEADER_STRUCT order) when ``view`` is exactly one producer batch that passes\n"
"every batch check of the append path (length, magic 2, at most ``max_bytes``, no control or\n"
"LogAppendTime flag, a known codec, records count and last offset delta consistent, CRC32C) and,\n"
"when its records are not compressed, every record check: well formed, exactly ``recordsCount`` of\n"
"them filling the batch, the header's maxTimestamp their largest (CreateTime), a key on each when\n"
"``require_keys``. None otherwise: the general path then names the error.");

static PyObject *
check_batch(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3)
        return PyErr_Format(PyExc_TypeError, "check_batch takes 3 arguments, %zd given", nargs);
    Py_ssize_t max_bytes = PyLong_AsSsize_t(args[1]);
    if (max_bytes == -1 && PyErr_Occurred())
        return NULL;
    int require_keys = PyObject_IsTrue(args[2]);
    if (require_keys < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *b = (const uint8_t *)view.buf;
    Py_ssize_t size = view.len;
    PyObject *result = NULL;
    if (size < HEADER_SIZE)
        goto no;
    int64_t base_offset = be64(b);
    int32_t length = be32(b + 8);
    int32_t epoch = be32(b + 12);
    int8_t magic = (int8_t)b[16];
    uint32_t crc = (uint32_t)be32(b + 17);
    int16_t attributes = be16(b + 21);
    int32_t delta = be32(b + 23);
    int64_t base_ts = be64(b + 27);
    int64_t max_ts = be64(b + 35);
    int64_t producer_id = be64(b + 43);
    int16_t producer_epoch = be16(b + 51);
    int32_t base_sequence = be32(b + 53);
    int32_t count = be32(b + 57);
    if ((Py_ssize_t)length + LOG_OVERHEAD != size || magic != 2 || size > max_bytes
        || (attributes & NOT_FROM_CLIENTS) || (attributes & COMPRESSION_MASK) > MAX_COMPRESSION || count <= 0
        || delta != count - 1)
        goto no;
    int crc_ok = crc_matches(b, size, crc);
    if (crc_ok < 0)
        goto done;
    if (!crc_ok)
        goto no;
    if ((attributes & COMPRESSION_MASK) == 0) {
        scan_state st;
        scan_init(&st, 0);
        if (scan(b + HEADER_SIZE, size - HEADER_SIZE, count, &st) < 0) {
            PyErr_Clear(); /* the general path names the error */
            goto no;
        }
        if (st.index != count || st.consumed != size - HEADER_SIZE)
            goto no;
        long long records_max;
        if (__builtin_add_overflow((long long)base_ts, st.max_ts, &records_max) || records_max != max_ts
            || (require_keys && st.null_key >= 0))
            goto no;
    }
    {
        /* the tuple built field by field: Py_BuildValue's format parsing cost a tenth of a 16 KiB check */
        const long long values[13] = {base_offset, length, epoch, magic, crc, attributes, delta,
                                      base_ts, max_ts, producer_id, producer_epoch, base_sequence, count};
        result = PyTuple_New(13);
        if (result == NULL)
            goto done;
        for (Py_ssize_t i = 0; i < 13; i++) {
            PyObject *item = PyLong_FromLongLong(values[i]);
            if (item == NULL) {
                Py_CLEAR(result);
                goto done;
            }
            PyTuple_SET_ITEM(result, i, item);
        }
    }
    goto done;
no:
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"scan_records", (PyCFunction)(void (*)(void))scan_records, METH_FASTCALL, scan_records_doc},
    {"flag_records", (PyCFunction)(void (*)(void))flag_records, METH_FASTCALL, flag_records_doc},
    {"check_batch", (PyCFunction)(void (*)(void))check_batch, METH_FASTCALL, check_batch_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "rill.records._scan", "Record batch checks, compiled (twin: rill.records.scan).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__scan(void)
{
    PyObject *crc_module = PyImport_ImportModule("crc32c_rs");
    if (crc_module == NULL)
        return NULL;
    crc32c_fn = PyObject_GetAttrString(crc_module, "crc32c");
    Py_DECREF(crc_module);
    if (crc32c_fn == NULL)
        return NULL;
    return PyModule_Create(&module);
}
