/* The forward-op store of nvbridge.engine.forward_links: per key (a thread's group above a seq), the
 * latest forward op of earlier windows. A hash map, so a window adds its ops in time linear in
 * them; the NumPy store re-sorted every entry it held each window.
 *
 * Each entry carries the stamp it was put with (the NVTX rows read by then): evict() drops the
 * entries put before a stamp and remembers, per group, the span of seqs it dropped, so a lookup
 * that misses can tell whether an evicted op might have answered it (evicted()). */
#include "native.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define VALUES 5
#define EMPTY INT64_MIN

typedef struct {
    int64_t key, seq, op_id, stamp;
    int32_t ids[VALUES - 1]; /* pool ids: module path, shapes, op name, dtypes */
} Entry;

typedef struct {
    PyObject_HEAD
    Entry *slots;
    size_t cap; /* a power of two, or 0 */
    Py_ssize_t count;
    int seq_bits;             /* key = group << seq_bits | seq's low bits */
    int64_t *span_lo, *span_hi; /* per group: the seqs evicted, lo > hi for none */
    Py_ssize_t groups;
} Store;

static Entry *find(const Store *s, int64_t key) {
    size_t at = native_mix64((uint64_t)key) & (s->cap - 1);
    while (s->slots[at].key != EMPTY && s->slots[at].key != key) at = (at + 1) & (s->cap - 1);
    return &s->slots[at];
}

static int rehash(Store *s, size_t cap) {
    Entry *old = s->slots, *slots = malloc(cap * sizeof(Entry));
    if (!slots) return -1;
    for (size_t i = 0; i < cap; i++) slots[i].key = EMPTY;
    size_t old_cap = s->cap;
    s->slots = slots;
    s->cap = cap;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].key != EMPTY) *find(s, old[i].key) = old[i];
    free(old);
    return 0;
}

static int grow(Store *s) { return rehash(s, s->cap ? s->cap * 2 : 1024); }

static int int64_view(PyObject *obj, Py_buffer *view, Py_ssize_t n, const char *what) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS) < 0) return -1;
    if (view->len != n * 8) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes for %zd int64 values", what, view->len, n);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* The (keys, seq) pair of int64 buffers of one length that get() and evicted() take, and their
 * output of ``width`` bytes per row (NULL, views released, on failure). */
static void *key_views(PyObject *args, Py_buffer *kb, Py_buffer *qb, Py_ssize_t *m, size_t width) {
    PyObject *k, *q;
    if (!PyArg_ParseTuple(args, "OO", &k, &q)) return NULL;
    if (PyObject_GetBuffer(k, kb, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    *m = kb->len / 8;
    if (int64_view(q, qb, *m, "seq") < 0) {
        PyBuffer_Release(kb);
        return NULL;
    }
    void *out = malloc((size_t)*m * width + 1);
    if (!out) {
        PyBuffer_Release(kb);
        PyBuffer_Release(qb);
        PyErr_NoMemory();
    }
    return out;
}

/* put(keys, seq, values, stamp): values int64 [5][n]; each row replaces its key's entry (rows in
 * time order: the last row of a key is its latest op). */
static PyObject *Store_put(Store *self, PyObject *args) {
    PyObject *k, *q, *v;
    long long stamp = 0;
    if (!PyArg_ParseTuple(args, "OOO|L", &k, &q, &v, &stamp)) return NULL;
    Py_buffer kb, qb, vb;
    if (PyObject_GetBuffer(k, &kb, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    Py_ssize_t n = kb.len / 8;
    if (int64_view(q, &qb, n, "seq") < 0) {
        PyBuffer_Release(&kb);
        return NULL;
    }
    if (int64_view(v, &vb, n * VALUES, "values") < 0) {
        PyBuffer_Release(&kb);
        PyBuffer_Release(&qb);
        return NULL;
    }
    const int64_t *keys = kb.buf, *seq = qb.buf, *vals = vb.buf;
    int failed = 0;
    for (Py_ssize_t i = 0; i < n && !failed; i++) {
        if (keys[i] == EMPTY) continue;
        if ((size_t)(self->count + 1) * 10 > self->cap * 7 && grow(self) < 0) {
            failed = 1;
            break;
        }
        Entry *e = find(self, keys[i]);
        if (e->key == EMPTY) self->count++;
        e->key = keys[i];
        e->seq = seq[i];
        e->stamp = stamp;
        e->op_id = vals[i];
        for (int j = 1; j < VALUES; j++) e->ids[j - 1] = (int32_t)vals[(Py_ssize_t)j * n + i];
    }
    PyBuffer_Release(&kb);
    PyBuffer_Release(&qb);
    PyBuffer_Release(&vb);
    if (failed) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

/* get(keys, seq) -> int64 [5][m]: each key's entry where its seq matches, else -1s. */
static PyObject *Store_get(Store *self, PyObject *args) {
    Py_buffer kb, qb;
    Py_ssize_t m;
    int64_t *out = key_views(args, &kb, &qb, &m, VALUES * sizeof(int64_t));
    if (!out) return NULL;
    const int64_t *keys = kb.buf, *seq = qb.buf;
    for (Py_ssize_t i = 0; i < m; i++) {
        const Entry *e = self->cap && keys[i] != EMPTY ? find(self, keys[i]) : NULL;
        int hit = e && e->key == keys[i] && e->seq == seq[i];
        out[i] = hit ? e->op_id : -1;
        for (int j = 1; j < VALUES; j++) out[(Py_ssize_t)j * m + i] = hit ? e->ids[j - 1] : -1;
    }
    PyBuffer_Release(&kb);
    PyBuffer_Release(&qb);
    return native_buffer(out, (Py_ssize_t)(VALUES * m * sizeof(int64_t)));
}

/* evict(before) -> entries dropped: those put with a stamp below ``before``. */
static PyObject *Store_evict(Store *self, PyObject *args) {
    long long before;
    if (!PyArg_ParseTuple(args, "L", &before)) return NULL;
    Py_ssize_t dropped = 0;
    for (size_t i = 0; i < self->cap; i++) {
        Entry *e = &self->slots[i];
        if (e->key == EMPTY || e->stamp >= before) continue;
        Py_ssize_t g = (Py_ssize_t)(e->key >> self->seq_bits);
        if (g >= self->groups) {
            Py_ssize_t groups = g + 16;
            int64_t *lo = realloc(self->span_lo, (size_t)groups * 8), *hi = NULL;
            if (lo) self->span_lo = lo;
            hi = lo ? realloc(self->span_hi, (size_t)groups * 8) : NULL;
            if (!lo || !hi) return PyErr_NoMemory();
            self->span_hi = hi;
            for (Py_ssize_t j = self->groups; j < groups; j++) {
                self->span_lo[j] = INT64_MAX;
                self->span_hi[j] = INT64_MIN;
            }
            self->groups = groups;
        }
        if (e->seq < self->span_lo[g]) self->span_lo[g] = e->seq;
        if (e->seq > self->span_hi[g]) self->span_hi[g] = e->seq;
        e->key = EMPTY;
        dropped++;
    }
    if (dropped) {
        /* Rebuild: linear probing cannot leave holes; the table shrinks with what is left. */
        self->count -= dropped;
        size_t cap = 1024;
        while ((size_t)self->count * 2 > cap) cap *= 2;
        if (rehash(self, cap) < 0) return PyErr_NoMemory();
    }
    return PyLong_FromSsize_t(dropped);
}

/* evicted(keys, seq) -> uint8 [m]: 1 where the key's group dropped seqs spanning this one. */
static PyObject *Store_evicted(Store *self, PyObject *args) {
    Py_buffer kb, qb;
    Py_ssize_t m;
    uint8_t *out = key_views(args, &kb, &qb, &m, 1);
    if (!out) return NULL;
    const int64_t *keys = kb.buf, *seq = qb.buf;
    for (Py_ssize_t i = 0; i < m; i++) {
        Py_ssize_t g = keys[i] >= 0 ? (Py_ssize_t)(keys[i] >> self->seq_bits) : -1;
        out[i] = (uint8_t)(g >= 0 && g < self->groups && self->span_lo[g] <= seq[i] && seq[i] <= self->span_hi[g]);
    }
    PyBuffer_Release(&kb);
    PyBuffer_Release(&qb);
    return native_buffer(out, m);
}

static int Store_init(Store *self, PyObject *args, PyObject *kwds) {
    static char *keywords[] = {"seq_bits", NULL};
    int seq_bits = 40;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|i", keywords, &seq_bits)) return -1;
    if (seq_bits < 1 || seq_bits > 62) {
        PyErr_SetString(PyExc_ValueError, "seq_bits must be in 1..62");
        return -1;
    }
    self->seq_bits = seq_bits;
    return 0;
}

static Py_ssize_t Store_len(Store *self) { return self->count; }

static void Store_dealloc(Store *self) {
    free(self->span_lo);
    free(self->span_hi);
    free(self->slots);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Store_methods[] = {
    {"put", (PyCFunction)Store_put, METH_VARARGS,
     "put(keys, seq, values, stamp=0): int64 keys and seqs, values int64 [5][n] (op id, then four "
     "int32 pool ids); a row replaces its key's entry."},
    {"evict", (PyCFunction)Store_evict, METH_VARARGS,
     "evict(before) -> entries dropped: those put with a stamp below ``before``."},
    {"evicted", (PyCFunction)Store_evicted, METH_VARARGS,
     "evicted(keys, seq) -> uint8 buffer: 1 where the key's group dropped seqs spanning this one."},
    {"get", (PyCFunction)Store_get, METH_VARARGS,
     "get(keys, seq) -> int64 buffer [5][m]: the entries whose key and seq match, -1 elsewhere."},
    {NULL, NULL, 0, NULL}};

static PySequenceMethods Store_sequence = {.sq_length = (lenfunc)Store_len};

static PyTypeObject StoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nvbridge._native.Store",
    .tp_basicsize = sizeof(Store),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Store(seq_bits=40): the latest forward op per key (op id and four pool ids).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Store_init,
    .tp_dealloc = (destructor)Store_dealloc,
    .tp_methods = Store_methods,
    .tp_as_sequence = &Store_sequence,
};

int native_add_store(PyObject *module) {
    if (PyType_Ready(&StoreType) < 0) return -1;
    return PyModule_AddObjectRef(module, "Store", (PyObject *)&StoreType);
}
