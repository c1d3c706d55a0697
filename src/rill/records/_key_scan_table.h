/*
 * The offset map's key table for rill.records._key_scan (its Python type, KeyTable; twin:
 * rill.records.key_scan.PyKeyTable). Included by _key_scan.c only (its functions are static).
 */
#ifndef RILL_KEY_SCAN_TABLE_H
#define RILL_KEY_SCAN_TABLE_H

#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#include "_key_scan_md5.h"

static int
as_long_long(PyObject *o, long long *out)
{
    *out = PyLong_AsLongLong(o);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

/* ---- the offset map's table ---------------------------------------------------------------- */

/* Open addressing with linear probing, at most half full: a slot is empty while its offset_1 is 0. The
 * table grows as keys come (a small table stays in the CPU's caches), up to the length that holds
 * ``slots`` keys: 24 bytes a slot, 48 to 96 a key at most. */
typedef struct {
    uint64_t offset_1; /* the offset + 1 */
    digest_t digest;
} slot_t;

#define INITIAL_LENGTH 1024

typedef struct {
    PyObject_HEAD
    Py_ssize_t slots; /* the most entries it takes */
    Py_ssize_t size;
    size_t mask; /* the table's length - 1, a power of two */
    slot_t *table;
} KeyTable;

static uint64_t hash_seed[2]; /* from os.urandom at the module's start: no key set made to collide */

static inline uint64_t
mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static inline uint64_t
word(const uint8_t *p)
{
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}

/* The slot holding d in table[0:mask + 1], or the empty slot where it would go. */
static inline slot_t *
find_in(slot_t *table, size_t mask, const digest_t *d)
{
    uint64_t h = mix(word(d->bytes) ^ hash_seed[0] ^ mix(word(d->bytes + 8) ^ hash_seed[1]));
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        slot_t *s = &table[i];
        if (s->offset_1 == 0 || memcmp(s->digest.bytes, d->bytes, DIGEST_SIZE) == 0)
            return s;
    }
}

static inline slot_t *
find(const KeyTable *t, const digest_t *d)
{
    return find_in(t->table, t->mask, d);
}

/* Make room for ``more`` new keys (at most ``slots`` in all) without the table going over half full;
 * -1 with MemoryError set. */
static int
reserve(KeyTable *t, Py_ssize_t more)
{
    Py_ssize_t need = t->size + more < t->slots ? t->size + more : t->slots;
    size_t length = t->mask + 1;
    if ((size_t)need <= length / 2)
        return 0;
    while ((size_t)need > length / 2) {
        if (length > (size_t)PY_SSIZE_T_MAX / sizeof(slot_t) / 4) {
            PyErr_NoMemory();
            return -1;
        }
        length <<= 1;
    }
    slot_t *table = PyMem_RawCalloc(length, sizeof(slot_t));
    if (table == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i <= t->mask; i++)
        if (t->table[i].offset_1)
            *find_in(table, length - 1, &t->table[i].digest) = t->table[i];
    PyMem_RawFree(t->table);
    t->table = table;
    t->mask = length - 1;
    return 0;
}

/* Set d's offset (at least 0); -1 with an exception set when d is new and the table holds ``slots``
 * entries, or on no memory. */
static inline int
put(KeyTable *t, const digest_t *d, int64_t offset)
{
    slot_t *s = find(t, d);
    if (s->offset_1 == 0) {
        if (t->size >= t->slots) {
            PyErr_SetString(PyExc_OverflowError, "the offset map is full");
            return -1;
        }
        if ((size_t)t->size + 1 > (t->mask + 1) / 2) {
            if (reserve(t, 1) < 0)
                return -1;
            s = find(t, d);
        }
        s->digest = *d;
        t->size++;
    }
    s->offset_1 = (uint64_t)offset + 1;
    return 0;
}

static inline int64_t
get(const KeyTable *t, const digest_t *d)
{
    return (int64_t)find(t, d)->offset_1 - 1;
}

static PyObject *
table_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    Py_ssize_t slots;
    static char *names[] = {"slots", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "n", names, &slots))
        return NULL;
    if (slots < 1)
        return PyErr_Format(PyExc_ValueError, "an offset map needs at least one slot");
    KeyTable *t = (KeyTable *)type->tp_alloc(type, 0);
    if (t == NULL)
        return NULL;
    t->table = PyMem_RawCalloc(INITIAL_LENGTH, sizeof(slot_t));
    if (t->table == NULL) {
        Py_DECREF(t);
        return PyErr_NoMemory();
    }
    t->slots = slots;
    t->size = 0;
    t->mask = INITIAL_LENGTH - 1;
    return (PyObject *)t;
}

static void
table_dealloc(KeyTable *t)
{
    PyMem_RawFree(t->table);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static Py_ssize_t
table_len(KeyTable *t)
{
    return t->size;
}

/* A digest given to put or get: a key shorter than 16 bytes, or a 16-byte MD5 digest. */
static int
digest_arg(PyObject *o, digest_t *d)
{
    Py_buffer view;
    if (PyObject_GetBuffer(o, &view, PyBUF_SIMPLE) < 0)
        return -1;
    int ok = view.len <= DIGEST_SIZE;
    if (!ok)
        PyErr_SetString(PyExc_ValueError, "a key digest has at most 16 bytes");
    else if (view.len < DIGEST_SIZE)
        pad_into((const uint8_t *)view.buf, view.len, d);
    else
        memcpy(d->bytes, view.buf, DIGEST_SIZE);
    PyBuffer_Release(&view);
    return ok ? 0 : -1;
}

static PyObject *
table_put(KeyTable *t, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2)
        return PyErr_Format(PyExc_TypeError, "put takes 2 arguments, %zd given", nargs);
    digest_t d;
    long long offset;
    if (digest_arg(args[0], &d) < 0 || as_long_long(args[1], &offset) < 0)
        return NULL;
    if (offset < 0)
        return PyErr_Format(PyExc_ValueError, "an offset is at least 0");
    if (put(t, &d, offset) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
table_get(KeyTable *t, PyObject *digest)
{
    digest_t d;
    if (digest_arg(digest, &d) < 0)
        return NULL;
    return PyLong_FromLongLong(get(t, &d));
}

static PyObject *
table_clear(KeyTable *t, PyObject *unused)
{
    slot_t *small = t->mask + 1 > INITIAL_LENGTH ? PyMem_RawCalloc(INITIAL_LENGTH, sizeof(slot_t)) : NULL;
    if (small != NULL) { /* its memory back until the next cleaning */
        PyMem_RawFree(t->table);
        t->table = small;
        t->mask = INITIAL_LENGTH - 1;
    } else if (t->size) {
        memset(t->table, 0, (t->mask + 1) * sizeof(slot_t));
    }
    t->size = 0;
    Py_RETURN_NONE;
}

static PyMethodDef table_methods[] = {
    {"put", (PyCFunction)(void (*)(void))table_put, METH_FASTCALL, "put(digest, offset): set the key's latest offset"},
    {"get", (PyCFunction)table_get, METH_O, "get(digest) -> the key's latest offset, -1 when not held"},
    {"clear", (PyCFunction)table_clear, METH_NOARGS, "clear(): remove every entry"},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef table_members[] = {
    {"slots", T_PYSSIZET, offsetof(KeyTable, slots), READONLY, "the most entries it takes"},
    {NULL, 0, 0, 0, NULL},
};

static PySequenceMethods table_as_sequence = {.sq_length = (lenfunc)table_len};

static PyTypeObject KeyTableType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rill.records._key_scan.KeyTable",
    .tp_doc = "KeyTable(slots): key digest -> latest offset, at most ``slots`` entries (twin: PyKeyTable).",
    .tp_basicsize = sizeof(KeyTable),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = table_new,
    .tp_dealloc = (destructor)table_dealloc,
    .tp_methods = table_methods,
    .tp_members = table_members,
    .tp_as_sequence = &table_as_sequence,
};

static int
table_arg(PyObject *o, const char *fn, KeyTable **out)
{
    if (!PyObject_TypeCheck(o, &KeyTableType)) {
        PyErr_Format(PyExc_TypeError, "%s takes a KeyTable first", fn);
        return -1;
    }
    *out = (KeyTable *)o;
    return 0;
}

#endif
