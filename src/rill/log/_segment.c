/*
 * rill.log._segment: the write-side state of a segment and its indexes, and the append, compiled.
 *
 * The pure-Python twin is in rill/log/segment_state.py (PySegmentState, PyIndexState), with the
 * same attributes, methods and results; the tests drive both through the same operations and
 * compare the files and the state. Anything but the common case is handed to the Python method
 * LogSegment._add_index_entries_slow, which both implementations share.
 *
 * Index entries, big-endian (see rill/log/offset_index.py and rill/log/time_index.py):
 *
 *     .index       relativeOffset int32, position int32                        8 bytes
 *     .timeindex   timestamp int64, relativeOffset int32                       12 bytes
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <errno.h>
#include <stdint.h>
#include <unistd.h>

#define OFFSET_ENTRY 8
#define TIME_ENTRY 12

/* ---- IndexState --------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    long long base_offset;
    Py_ssize_t entry_size;
    Py_ssize_t entries;
    Py_ssize_t max_entries;
    Py_ssize_t reserved;
    PyObject *mm;   /* the mmap, None, or NULL before it is set */
    PyObject *last; /* tuple of the last entry's fields, None, or NULL before it is set */
} IndexState;

static int
index_traverse(IndexState *self, visitproc visit, void *arg)
{
    Py_VISIT(self->mm);
    Py_VISIT(self->last);
    return 0;
}

static int
index_clear(IndexState *self)
{
    Py_CLEAR(self->mm);
    Py_CLEAR(self->last);
    return 0;
}

static void
index_dealloc(IndexState *self)
{
    PyObject_GC_UnTrack(self);
    index_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef index_members[] = {
    {"base_offset", T_LONGLONG, offsetof(IndexState, base_offset), 0, NULL},
    {"entry_size", T_PYSSIZET, offsetof(IndexState, entry_size), 0, NULL},
    {"_entries", T_PYSSIZET, offsetof(IndexState, entries), 0, NULL},
    {"_max_entries", T_PYSSIZET, offsetof(IndexState, max_entries), 0, NULL},
    {"_reserved", T_PYSSIZET, offsetof(IndexState, reserved), 0, NULL},
    {"_mm", T_OBJECT_EX, offsetof(IndexState, mm), 0, NULL},
    {"_last", T_OBJECT_EX, offsetof(IndexState, last), 0, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject IndexStateType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "rill.log._segment.IndexState",
    .tp_doc = PyDoc_STR("The write-side state of a segment index (twin: rill.log.segment_state.PyIndexState)."),
    .tp_basicsize = sizeof(IndexState),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)index_dealloc,
    .tp_traverse = (traverseproc)index_traverse,
    .tp_clear = (inquiry)index_clear,
    .tp_members = index_members,
};

/* ---- SegmentState ------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    long long base_offset;
    long long size;
    long long next_offset;
    long long max_timestamp;
    long long offset_of_max_timestamp;
    long long bytes_since_last_index_entry;
    long long index_interval_bytes;
    long long created_ms;
    long long roll_jitter_ms;
    char index_full;
    int fd;
    PyObject *rolling_based_timestamp; /* int or None */
    PyObject *offset_index;            /* IndexState instances, NULL before they are set */
    PyObject *time_index;
} SegmentState;

static int
segment_traverse(SegmentState *self, visitproc visit, void *arg)
{
    Py_VISIT(self->rolling_based_timestamp);
    Py_VISIT(self->offset_index);
    Py_VISIT(self->time_index);
    return 0;
}

static int
segment_clear(SegmentState *self)
{
    Py_CLEAR(self->rolling_based_timestamp);
    Py_CLEAR(self->offset_index);
    Py_CLEAR(self->time_index);
    return 0;
}

static void
segment_dealloc(SegmentState *self)
{
    PyObject_GC_UnTrack(self);
    segment_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
segment_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    SegmentState *self = (SegmentState *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->max_timestamp = -1;
    self->offset_of_max_timestamp = -1;
    self->fd = -1;
    self->rolling_based_timestamp = Py_NewRef(Py_None);
    return (PyObject *)self;
}

static void
put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static void
put_be64(uint8_t *p, uint64_t v)
{
    put_be32(p, (uint32_t)(v >> 32));
    put_be32(p + 4, (uint32_t)v);
}

/* The fields of an index's last entry, into *first and *second: 0; 1 when the index is empty; -1
 * when the last entry is not known here (not read yet, or not a pair of int64: the slow path reads it). */
static int
last_entry(IndexState *index, long long *first, long long *second)
{
    if (index->last == NULL || index->last == Py_None)
        return index->entries == 0 ? 1 : -1;
    if (!PyTuple_CheckExact(index->last) || PyTuple_GET_SIZE(index->last) != 2)
        return -1;
    *first = PyLong_AsLongLong(PyTuple_GET_ITEM(index->last, 0));
    *second = PyLong_AsLongLong(PyTuple_GET_ITEM(index->last, 1));
    if ((*first == -1 || *second == -1) && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    return 0;
}

/* Can the next entry be stored without reserving blocks, and does the map hold it? */
static int
has_room(IndexState *index)
{
    Py_ssize_t position = index->entries * index->entry_size;
    return index->mm != NULL && index->mm != Py_None && index->entries < index->max_entries
           && position + index->entry_size <= index->reserved;
}

/* Store an entry's bytes into the index's map and remember its fields. 0, or -1 with an error set. */
static int
store_entry(IndexState *index, const uint8_t *entry, long long first, long long second)
{
    Py_ssize_t position = index->entries * index->entry_size;
    Py_buffer map;
    if (PyObject_GetBuffer(index->mm, &map, PyBUF_WRITABLE) < 0)
        return -1;
    if (position + index->entry_size > map.len) {
        PyBuffer_Release(&map);
        PyErr_SetString(PyExc_RuntimeError, "index entry beyond its map");
        return -1;
    }
    memcpy((uint8_t *)map.buf + position, entry, (size_t)index->entry_size);
    PyBuffer_Release(&map);
    PyObject *last = Py_BuildValue("(LL)", first, second);
    if (last == NULL)
        return -1;
    Py_XSETREF(index->last, last);
    index->entries++;
    return 0;
}

/* LogSegment._add_index_entries_slow, for the common case: both indexes known, with room, values
 * in range. Returns 1 when done, 0 when the slow path must do it all, -1 on error. Decides before
 * storing anything, so the slow path never sees half of it done. */
static int
add_index_entries_fast(SegmentState *self, long long last_offset, long long position)
{
    if (self->offset_index == NULL || self->time_index == NULL
        || !PyObject_TypeCheck(self->offset_index, &IndexStateType)
        || !PyObject_TypeCheck(self->time_index, &IndexStateType))
        return 0;
    IndexState *oi = (IndexState *)self->offset_index;
    IndexState *ti = (IndexState *)self->time_index;
    if (oi->entry_size != OFFSET_ENTRY || ti->entry_size != TIME_ENTRY)
        return 0;
    long long first, second;
    /* OffsetIndex.append(last_offset, position): skipped when not above the last entry */
    long long relative = last_offset - oi->base_offset;
    int state = last_entry(oi, &first, &second);
    if (state < 0)
        return 0;
    int write_offset = state == 1 || relative > first;
    if (write_offset && (!has_room(oi) || relative < INT32_MIN || relative > INT32_MAX || position < INT32_MIN
                         || position > INT32_MAX))
        return 0;
    /* TimeIndex.maybe_append(max_timestamp, offset_of_max_timestamp), when there is a timestamp */
    int write_time = 0;
    long long time_relative = self->offset_of_max_timestamp - ti->base_offset;
    if (self->max_timestamp >= 0) {
        state = last_entry(ti, &first, &second);
        if (state < 0)
            return 0;
        write_time = state == 1 || !(self->max_timestamp <= first || time_relative < second);
        if (write_time && (!has_room(ti) || time_relative < INT32_MIN || time_relative > INT32_MAX))
            return 0;
    }
    self->bytes_since_last_index_entry = 0;
    int full = 0;
    uint8_t entry[TIME_ENTRY];
    if (write_offset) {
        put_be32(entry, (uint32_t)(int32_t)relative);
        put_be32(entry + 4, (uint32_t)(int32_t)position);
        if (store_entry(oi, entry, relative, position) < 0)
            return -1;
        full = oi->entries >= oi->max_entries;
    }
    if (write_time) {
        put_be64(entry, (uint64_t)self->max_timestamp);
        put_be32(entry + 8, (uint32_t)(int32_t)time_relative);
        if (store_entry(ti, entry, self->max_timestamp, time_relative) < 0)
            return -1;
        full = full || ti->entries >= ti->max_entries;
    }
    if (full)
        self->index_full = 1;
    return 1;
}

static int
index_batch(SegmentState *self, long long position, long long last_offset, long long max_ts, long long size)
{
    if (max_ts > self->max_timestamp) {
        self->max_timestamp = max_ts;
        self->offset_of_max_timestamp = last_offset;
    }
    if (self->bytes_since_last_index_entry > self->index_interval_bytes) {
        int done = add_index_entries_fast(self, last_offset, position);
        if (done < 0)
            return -1;
        if (!done) {
            PyObject *r = PyObject_CallMethod((PyObject *)self, "_add_index_entries_slow", "LL", last_offset, position);
            if (r == NULL)
                return -1;
            Py_DECREF(r);
        }
    }
    self->bytes_since_last_index_entry += size;
    self->next_offset = last_offset + 1;
    return 0;
}

static int
long_args(const char *name, PyObject *const *args, Py_ssize_t nargs, Py_ssize_t want, long long *out)
{
    if (nargs != want) {
        PyErr_Format(PyExc_TypeError, "%s takes %zd arguments, %zd given", name, want, nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < want; i++) {
        out[i] = PyLong_AsLongLong(args[i]);
        if (out[i] == -1 && PyErr_Occurred())
            return -1;
    }
    return 0;
}

PyDoc_STRVAR(index_batch_doc, "_index_batch(position, last_offset, max_ts, size): account for a batch written.");

static PyObject *
segment_index_batch(SegmentState *self, PyObject *const *args, Py_ssize_t nargs)
{
    long long a[4];
    if (long_args("_index_batch", args, nargs, 4, a) < 0 || index_batch(self, a[0], a[1], a[2], a[3]) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static int should_roll(SegmentState *self, long long size, long long max_ts, long long last_offset,
                       long long now_ms, long long segment_bytes, long long segment_ms);

/* Write the batch in buf at the end and index it; on a failed write the file is cut back to its
 * previous size. 0, or -1 with an error set. */
static int
append_batch(SegmentState *self, Py_buffer *buf, long long last_offset, long long max_ts)
{
    long long start = self->size;
    Py_ssize_t written = 0;
    int fd = self->fd;
    while (written < buf->len) {
        ssize_t n;
        Py_BEGIN_ALLOW_THREADS
        n = pwrite(fd, (const char *)buf->buf + written, (size_t)(buf->len - written), (off_t)(start + written));
        Py_END_ALLOW_THREADS
        if (n < 0 && errno == EINTR) {
            if (PyErr_CheckSignals() < 0)
                goto failed;
            continue;
        }
        if (n < 0) {
            PyErr_SetFromErrno(PyExc_OSError);
            goto failed;
        }
        if (n == 0) {
            PyErr_SetString(PyExc_OSError, "pwrite wrote nothing");
            goto failed;
        }
        written += n;
    }
    self->size = start + buf->len;
    if (self->rolling_based_timestamp == NULL || self->rolling_based_timestamp == Py_None) {
        PyObject *ts = PyLong_FromLongLong(max_ts);
        if (ts == NULL)
            return -1;
        Py_XSETREF(self->rolling_based_timestamp, ts);
    }
    return index_batch(self, start, last_offset, max_ts, buf->len);
failed:
    {
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        if (ftruncate(fd, (off_t)start) < 0) { /* drop whatever part reached the file; keep the write's error */
        }
        PyErr_Restore(type, value, traceback);
    }
    return -1;
}

PyDoc_STRVAR(try_append_doc,
"try_append(buf, first_offset, last_offset, max_ts, leader_epoch, now_ms, segment_bytes, segment_ms) -> bool\n\n"
"Append one whole batch from a producer: False, with nothing done, when it must go into a new segment\n"
"(should_roll); else stamp its base offset and partition leader epoch into buf, write it at the end,\n"
"index it and return True. On OSError the file is cut back to its previous size and the error re-raised.");

static PyObject *
segment_try_append(SegmentState *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8)
        return PyErr_Format(PyExc_TypeError, "try_append takes 8 arguments, %zd given", nargs);
    long long a[7];
    if (long_args("try_append", args + 1, 7, 7, a) < 0)
        return NULL;
    long long first_offset = a[0], last_offset = a[1], max_ts = a[2], leader_epoch = a[3];
    if (leader_epoch < INT32_MIN || leader_epoch > INT32_MAX)
        return PyErr_Format(PyExc_OverflowError, "leader epoch %lld out of range", leader_epoch);
    Py_buffer buf;
    if (PyObject_GetBuffer(args[0], &buf, PyBUF_WRITABLE) < 0)
        return NULL;
    PyObject *result = NULL;
    if (buf.len < 16) {
        PyErr_SetString(PyExc_ValueError, "try_append: not a record batch");
        goto done;
    }
    if (self->size) {
        int roll = should_roll(self, buf.len, max_ts, last_offset, a[4], a[5], a[6]);
        if (roll < 0)
            goto done;
        if (roll) {
            result = Py_NewRef(Py_False);
            goto done;
        }
    }
    put_be64((uint8_t *)buf.buf, (uint64_t)first_offset);        /* baseOffset */
    put_be32((uint8_t *)buf.buf + 12, (uint32_t)(int32_t)leader_epoch); /* partitionLeaderEpoch */
    if (append_batch(self, &buf, last_offset, max_ts) == 0)
        result = Py_NewRef(Py_True);
done:
    PyBuffer_Release(&buf);
    return result;
}

PyDoc_STRVAR(should_roll_doc,
"should_roll(size, max_ts, last_offset, now_ms, segment_bytes, segment_ms): must a batch of size bytes go\n"
"into a new segment? (after segment_ms less the segment's roll_jitter_ms)");

/* 1: roll, 0: no, -1: error */
static int
should_roll(SegmentState *self, long long size, long long max_ts, long long last_offset, long long now_ms,
            long long segment_bytes, long long segment_ms)
{
    long long room, span, waited, roll_ms;
    /* a difference beyond int64 has the sign of the comparison of its terms */
    int past_size = __builtin_sub_overflow(segment_bytes, size, &room) ? segment_bytes < size : self->size > room;
    int past_span = __builtin_sub_overflow(last_offset, self->base_offset, &span) ? last_offset > self->base_offset
                                                                                 : span > INT32_MAX;
    if (past_size || self->index_full || past_span)
        return 1;
    PyObject *rolling = self->rolling_based_timestamp;
    long long rolling_ts = -1;
    if (rolling != NULL && rolling != Py_None) {
        rolling_ts = PyLong_AsLongLong(rolling);
        if (rolling_ts == -1 && PyErr_Occurred())
            return -1;
    }
    long long later = rolling_ts >= 0 ? max_ts : now_ms, earlier = rolling_ts >= 0 ? rolling_ts : self->created_ms;
    if (__builtin_sub_overflow(later, earlier, &waited))
        return later > earlier;
    if (__builtin_sub_overflow(segment_ms, self->roll_jitter_ms, &roll_ms))
        return self->roll_jitter_ms > 0;
    return waited > roll_ms;
}

static PyObject *
segment_should_roll(SegmentState *self, PyObject *const *args, Py_ssize_t nargs)
{
    long long a[6];
    if (long_args("should_roll", args, nargs, 6, a) < 0)
        return NULL;
    int roll = should_roll(self, a[0], a[1], a[2], a[3], a[4], a[5]);
    return roll < 0 ? NULL : PyBool_FromLong(roll);
}

static PyMethodDef segment_methods[] = {
    {"try_append", (PyCFunction)(void (*)(void))segment_try_append, METH_FASTCALL, try_append_doc},
    {"_index_batch", (PyCFunction)(void (*)(void))segment_index_batch, METH_FASTCALL, index_batch_doc},
    {"should_roll", (PyCFunction)(void (*)(void))segment_should_roll, METH_FASTCALL, should_roll_doc},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef segment_members[] = {
    {"base_offset", T_LONGLONG, offsetof(SegmentState, base_offset), 0, NULL},
    {"size", T_LONGLONG, offsetof(SegmentState, size), 0, NULL},
    {"next_offset", T_LONGLONG, offsetof(SegmentState, next_offset), 0, NULL},
    {"max_timestamp", T_LONGLONG, offsetof(SegmentState, max_timestamp), 0, NULL},
    {"offset_of_max_timestamp", T_LONGLONG, offsetof(SegmentState, offset_of_max_timestamp), 0, NULL},
    {"bytes_since_last_index_entry", T_LONGLONG, offsetof(SegmentState, bytes_since_last_index_entry), 0, NULL},
    {"index_interval_bytes", T_LONGLONG, offsetof(SegmentState, index_interval_bytes), 0, NULL},
    {"created_ms", T_LONGLONG, offsetof(SegmentState, created_ms), 0, NULL},
    {"roll_jitter_ms", T_LONGLONG, offsetof(SegmentState, roll_jitter_ms), 0, NULL},
    {"index_full", T_BOOL, offsetof(SegmentState, index_full), 0, NULL},
    {"_fd", T_INT, offsetof(SegmentState, fd), 0, NULL},
    {"rolling_based_timestamp", T_OBJECT, offsetof(SegmentState, rolling_based_timestamp), 0, NULL},
    {"offset_index", T_OBJECT_EX, offsetof(SegmentState, offset_index), 0, NULL},
    {"time_index", T_OBJECT_EX, offsetof(SegmentState, time_index), 0, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject SegmentStateType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "rill.log._segment.SegmentState",
    .tp_doc = PyDoc_STR("The write-side state of a segment (twin: rill.log.segment_state.PySegmentState)."),
    .tp_basicsize = sizeof(SegmentState),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = segment_new,
    .tp_dealloc = (destructor)segment_dealloc,
    .tp_traverse = (traverseproc)segment_traverse,
    .tp_clear = (inquiry)segment_clear,
    .tp_members = segment_members,
    .tp_methods = segment_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "rill.log._segment",
    "Segment write-side state and append, compiled (twin: rill.log.segment_state).", -1,
    NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__segment(void)
{
    if (PyType_Ready(&IndexStateType) < 0 || PyType_Ready(&SegmentStateType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "IndexState", (PyObject *)&IndexStateType) < 0
        || PyModule_AddObjectRef(m, "SegmentState", (PyObject *)&SegmentStateType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
