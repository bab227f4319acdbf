/* The page reader's arguments, each checked for its exact shape and type (Python's side builds
 * them as frozen dataclasses: readers/_pages.py). A tuple of another length, a list where a
 * tuple is due, a bool where an integer is due (or the reverse) is a TypeError, never a guess. */
#include "page_args.h"

#include <limits.h>

/* An int that is not a bool, as int64. */
static int exact_int(PyObject *o, const char *what, int64_t *out) {
    if (!PyLong_Check(o) || PyBool_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, not %.80s", what, Py_TYPE(o)->tp_name);
        return -1;
    }
    long long v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred()) return -1;
    *out = v;
    return 0;
}

static int exact_tuple(PyObject *o, const char *what, Py_ssize_t size) {
    if (!PyTuple_Check(o) || (size >= 0 && PyTuple_GET_SIZE(o) != size)) {
        if (size >= 0)
            PyErr_Format(PyExc_TypeError, "%s must be a tuple of %zd items", what, size);
        else
            PyErr_Format(PyExc_TypeError, "%s must be a tuple", what);
        return -1;
    }
    return 0;
}

static int exact_bool(PyObject *o, const char *what, int *out) {
    if (!PyBool_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be a bool", what);
        return -1;
    }
    *out = o == Py_True;
    return 0;
}

/* A record position: -1 (the rowid) to MAX_POSITION. */
static int exact_position(PyObject *o, const char *what, int *out) {
    int64_t v;
    if (exact_int(o, what, &v)) return -1;
    if (v < -1 || v > MAX_POSITION) {
        PyErr_Format(PyExc_ValueError, "%s: a record position out of range", what);
        return -1;
    }
    *out = (int)v;
    return 0;
}

int arg_ints(PyObject *o, const char *what, int64_t **out, int *n) {
    if (exact_tuple(o, what, -1)) return -1;
    Py_ssize_t size = PyTuple_GET_SIZE(o);
    if (size > INT_MAX) {
        PyErr_Format(PyExc_ValueError, "%s: too many values", what);
        return -1;
    }
    if (!(*out = malloc((size_t)(size ? size : 1) * sizeof(int64_t)))) {
        PyErr_NoMemory();
        return -1;
    }
    *n = (int)size;
    for (Py_ssize_t i = 0; i < size; i++)
        if (exact_int(PyTuple_GET_ITEM(o, i), what, &(*out)[i])) return -1;
    return 0;
}

int arg_positions(PyObject *o, int **out, int *n) {
    if (exact_tuple(o, "positions", -1)) return -1;
    Py_ssize_t size = PyTuple_GET_SIZE(o);
    if (size > MAX_POSITION) {
        PyErr_SetString(PyExc_ValueError, "positions: too many columns");
        return -1;
    }
    if (!(*out = malloc((size_t)(size ? size : 1) * sizeof(int)))) {
        PyErr_NoMemory();
        return -1;
    }
    *n = (int)size;
    for (Py_ssize_t i = 0; i < size; i++)
        if (exact_position(PyTuple_GET_ITEM(o, i), "positions", &(*out)[i])) return -1;
    return 0;
}

int arg_member(PyObject *o, MemberArg *m) {
    m->field = -1;
    if (o == Py_None) return 0;
    if (exact_tuple(o, "member (position, values, nulls)", 3) ||
        exact_position(PyTuple_GET_ITEM(o, 0), "member position", &m->field) ||
        exact_bool(PyTuple_GET_ITEM(o, 2), "member nulls", &m->nulls))
        return -1;
    if (m->field < 0) {
        PyErr_SetString(PyExc_ValueError, "member position: a filter on the rowid is a span");
        return -1;
    }
    return arg_ints(PyTuple_GET_ITEM(o, 1), "member values", &m->values, &m->n);
}

int arg_bound(PyObject *o, BoundArg *b) {
    b->field = -1;
    if (o == Py_None) return 0;
    if (exact_tuple(o, "bound (position, lo, hi, nulls)", 4) ||
        exact_position(PyTuple_GET_ITEM(o, 0), "bound position", &b->field) ||
        exact_bool(PyTuple_GET_ITEM(o, 3), "bound nulls", &b->nulls))
        return -1;
    if (b->field < 0) {
        PyErr_SetString(PyExc_ValueError, "bound position: a filter on the rowid is a span");
        return -1;
    }
    PyObject *lo = PyTuple_GET_ITEM(o, 1), *hi = PyTuple_GET_ITEM(o, 2);
    b->has_lo = lo != Py_None;
    b->has_hi = hi != Py_None;
    if ((b->has_lo && exact_int(lo, "bound lo", &b->lo)) || (b->has_hi && exact_int(hi, "bound hi", &b->hi))) return -1;
    if (!b->has_lo && !b->has_hi) b->field = -1; /* no bound: every row, as SQL's (1) */
    return 0;
}

int arg_spans(PyObject *o, SpansArg *s) {
    s->n = -1;
    if (o == Py_None) return 0;
    if (exact_tuple(o, "spans", -1)) return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(o);
    if (!(s->buf = malloc((size_t)(2 * n + 2) * sizeof(int64_t)))) {
        PyErr_NoMemory();
        return -1;
    }
    s->lo = s->buf;
    s->hi = s->buf + n + 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyTuple_GET_ITEM(o, i);
        if (exact_tuple(pair, "a span (lo, hi)", 2) || exact_int(PyTuple_GET_ITEM(pair, 0), "span lo", &s->lo[i]) ||
            exact_int(PyTuple_GET_ITEM(pair, 1), "span hi", &s->hi[i]))
            return -1;
        if (s->lo[i] > s->hi[i] || (i && s->lo[i] <= s->hi[i - 1])) {
            PyErr_SetString(PyExc_ValueError, "spans must be sorted, disjoint and non-empty");
            return -1;
        }
    }
    s->n = n;
    return 0;
}
