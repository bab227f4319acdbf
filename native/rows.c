/* Row-wise checks NumPy would need a sort for: duplicate rows of several int64 columns. */
#include "native.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t row_hash(const int64_t *const *cols, int k, Py_ssize_t row) {
    uint64_t h = 0x9E3779B97F4A7C15ULL;
    for (int c = 0; c < k; c++) {
        h ^= (uint64_t)cols[c][row] + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2);
        h *= 0xff51afd7ed558ccdULL;
        h ^= h >> 33;
    }
    return h;
}

static int same_row(const int64_t *const *cols, int k, Py_ssize_t a, Py_ssize_t b) {
    for (int c = 0; c < k; c++)
        if (cols[c][a] != cols[c][b]) return 0;
    return 1;
}

/* duplicates(col, col, ...): rows equal on every column to an earlier row (hash set, one pass). */
static PyObject *duplicates(PyObject *Py_UNUSED(module), PyObject *args) {
    int k = (int)PyTuple_GET_SIZE(args);
    if (k < 1 || k > 16) {
        PyErr_SetString(PyExc_ValueError, "give 1 to 16 int64 columns");
        return NULL;
    }
    Py_buffer views[16];
    const int64_t *cols[16];
    Py_ssize_t n = -1;
    int got = 0;
    PyObject *result = NULL;
    for (; got < k; got++) {
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(args, got), &views[got], PyBUF_C_CONTIGUOUS) < 0) goto done;
        Py_ssize_t rows = views[got].len / 8;
        if (views[got].len % 8 || (n >= 0 && rows != n)) {
            got++;
            PyErr_SetString(PyExc_ValueError, "columns must be int64 of one length");
            goto done;
        }
        n = rows;
        cols[got] = views[got].buf;
    }
    size_t cap = 16;
    while (cap < (size_t)n * 2) cap <<= 1;
    Py_ssize_t *slots = malloc(cap * sizeof(Py_ssize_t));
    if (!slots) {
        PyErr_NoMemory();
        goto done;
    }
    long long dups = 0;
    Py_BEGIN_ALLOW_THREADS
    for (size_t i = 0; i < cap; i++) slots[i] = -1;
    for (Py_ssize_t r = 0; r < n; r++) {
        size_t at = row_hash(cols, k, r) & (cap - 1);
        for (;;) {
            Py_ssize_t other = slots[at];
            if (other < 0) {
                slots[at] = r;
                break;
            }
            if (same_row(cols, k, other, r)) {
                dups++;
                break;
            }
            at = (at + 1) & (cap - 1);
        }
    }
    Py_END_ALLOW_THREADS
    free(slots);
    result = PyLong_FromLongLong(dups);
done:
    for (int i = 0; i < got; i++) PyBuffer_Release(&views[i]);
    return result;
}

static PyMethodDef methods[] = {
    {"duplicates", duplicates, METH_VARARGS,
     "duplicates(*columns) -> int\n\nRows (of int64 columns of one length) equal on every column "
     "to an earlier row."},
    {NULL, NULL, 0, NULL}};

int native_add_rows(PyObject *module) { return PyModule_AddFunctions(module, methods); }
