/* The fast path of nvbridge.engine.names._decorations in one pass over the names' bytes.
 *
 * A name splits on ", " into its op name and decorations; it is simple when each decoration is
 * one of the prefixes below then 1-18 ASCII digits. For simple names this gives the op name, seq
 * (and whether it was stashed), op_id and fwd_tid, exactly as the NumPy/Arrow path does; other
 * names are flagged ``complex`` and parsed by the regular expressions in Python. The op name is
 * also tested for the marks of a backward node (a class name ending in Backward or Backwards,
 * trailing digits aside, and torch's evaluate_function wrapper).
 */
#include "native.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { SEQ, OP_ID, FWD_TID, FIELDS };

/* names._SIMPLE, in the order a part is tested against them. */
static const struct {
    const char *prefix;
    int field;
    int stashed;
} SIMPLE[] = {
    {"op_id = ", OP_ID, 0},         {"seq = ", SEQ, 0},          {"stashed seq = ", SEQ, 1},
    {"fwd_tid = ", FWD_TID, 0},     {"seq= ", SEQ, 0},           {"seq =", SEQ, 0},
    {"seq=", SEQ, 0},               {"stashed seq= ", SEQ, 1},   {"stashed seq =", SEQ, 1},
    {"stashed seq=", SEQ, 1},
};
#define N_SIMPLE (sizeof SIMPLE / sizeof SIMPLE[0])
static const char EVALUATE[] = "autograd::engine::evaluate_function: ";

static int starts_with(const char *s, size_t n, const char *prefix) {
    size_t k = strlen(prefix);
    return n >= k && memcmp(s, prefix, k) == 0;
}

static int ends_with(const char *s, size_t n, const char *suffix) {
    size_t k = strlen(suffix);
    return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

/* Position of the first ", " in s[0:n], or n. */
static size_t find_sep(const char *s, size_t n) {
    for (size_t i = 0; i + 1 < n; i++) {
        const char *hit = memchr(s + i, ',', n - 1 - i);
        if (!hit) return n;
        i = (size_t)(hit - s);
        if (s[i + 1] == ' ') return i;
    }
    return n;
}

/* One decoration; 0 if it is not simple. */
static int decoration(const char *s, size_t n, int64_t value[FIELDS], uint8_t found[FIELDS],
                      uint8_t *stashed) {
    for (size_t k = 0; k < N_SIMPLE; k++) {
        if (!starts_with(s, n, SIMPLE[k].prefix)) continue;
        size_t p = strlen(SIMPLE[k].prefix);
        size_t digits = n - p;
        if (digits == 0 || digits > 18) return 0;
        int64_t v = 0;
        for (size_t i = p; i < n; i++) {
            if (s[i] < '0' || s[i] > '9') return 0;
            v = v * 10 + (s[i] - '0');
        }
        int f = SIMPLE[k].field;
        if (!found[f]) { /* the first decoration of a field is the one that counts */
            found[f] = 1;
            value[f] = v;
            if (f == SEQ) *stashed = (uint8_t)SIMPLE[k].stashed;
        }
        return 1;
    }
    return 0;
}

static PyObject *split_names(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *offsets_obj, *data_obj;
    Py_ssize_t first, n;
    if (!PyArg_ParseTuple(args, "OOnn", &offsets_obj, &data_obj, &first, &n)) return NULL;
    Py_buffer offsets_view, data_view;
    if (PyObject_GetBuffer(offsets_obj, &offsets_view, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(data_obj, &data_view, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&offsets_view);
        return NULL;
    }
    if (first < 0 || n < 0 || (size_t)(first + n + 1) * sizeof(int32_t) > (size_t)offsets_view.len) {
        PyBuffer_Release(&offsets_view);
        PyBuffer_Release(&data_view);
        PyErr_SetString(PyExc_ValueError, "offsets shorter than the names");
        return NULL;
    }
    const int32_t *offsets = (const int32_t *)offsets_view.buf + first;
    const char *data = data_view.buf;
    size_t rows = (size_t)n;
    int32_t *op_offsets = malloc((rows + 1) * sizeof(int32_t));
    char *op_data = malloc((size_t)(offsets[n] - offsets[0]) + 1);
    int64_t *values = malloc(FIELDS * rows * sizeof(int64_t) + 1);
    uint8_t *flags = malloc(FIELDS * rows + 4 * rows + 1); /* found x3, stashed, complex, node, evaluate */
    if (!op_offsets || !op_data || !values || !flags) {
        free(op_offsets);
        free(op_data);
        free(values);
        free(flags);
        PyBuffer_Release(&offsets_view);
        PyBuffer_Release(&data_view);
        return PyErr_NoMemory();
    }
    uint8_t *found = flags, *stashed = flags + FIELDS * rows, *complex = stashed + rows;
    uint8_t *node = complex + rows, *evaluate = node + rows;
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    size_t out = 0;
    op_offsets[0] = 0;
    for (size_t r = 0; r < rows; r++) {
        int32_t a = offsets[r], b = offsets[r + 1];
        if (b < a || (size_t)b > (size_t)data_view.len) {
            bad = 1;
            break;
        }
        const char *s = data + a;
        size_t len = (size_t)(b - a);
        int64_t value[FIELDS] = {0, 0, 0};
        uint8_t got[FIELDS] = {0, 0, 0}, stash = 0, cx = 0;
        size_t op_len = find_sep(s, len);
        size_t at = op_len;
        while (at < len) { /* at points at a ", " */
            const char *part = s + at + 2;
            size_t rest = len - at - 2;
            size_t part_len = find_sep(part, rest);
            if (!decoration(part, part_len, value, got, &stash)) cx = 1;
            at += 2 + part_len;
        }
        memcpy(op_data + out, s, op_len);
        out += op_len;
        op_offsets[r + 1] = (int32_t)out;
        for (int f = 0; f < FIELDS; f++) {
            values[f * rows + r] = value[f];
            found[f * rows + r] = got[f];
        }
        stashed[r] = stash;
        complex[r] = cx;
        size_t trimmed = op_len;
        while (trimmed && s[trimmed - 1] >= '0' && s[trimmed - 1] <= '9') trimmed--;
        node[r] = (uint8_t)(ends_with(s, trimmed, "Backward") || ends_with(s, trimmed, "Backwards"));
        evaluate[r] = (uint8_t)starts_with(s, op_len, EVALUATE);
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&offsets_view);
    PyBuffer_Release(&data_view);
    if (bad) {
        free(op_offsets);
        free(op_data);
        free(values);
        free(flags);
        PyErr_SetString(PyExc_ValueError, "offsets out of order or past the data");
        return NULL;
    }
    Py_ssize_t op_bytes = op_offsets[rows]; /* read now: a failed native_buffer frees op_offsets */
    PyObject *o = native_buffer(op_offsets, (Py_ssize_t)((rows + 1) * sizeof(int32_t)));
    PyObject *d = native_buffer(op_data, op_bytes);
    PyObject *v = native_buffer(values, (Py_ssize_t)(FIELDS * rows * sizeof(int64_t)));
    PyObject *f = native_buffer(flags, (Py_ssize_t)(FIELDS * rows + 4 * rows));
    PyObject *result = (o && d && v && f) ? PyTuple_Pack(4, o, d, v, f) : NULL;
    Py_XDECREF(o);
    Py_XDECREF(d);
    Py_XDECREF(v);
    Py_XDECREF(f);
    return result;
}

static PyMethodDef methods[] = {
    {"split_names", split_names, METH_VARARGS,
     "split_names(offsets, data, first, n) -> (op_offsets, op_data, values, flags)\n\n"
     "The names of a string array (its int32 offsets and data buffers, ``n`` names from "
     "offset ``first``) split into op names (a new string array's offsets and data); int64 "
     "values[3][n] of seq, op_id and fwd_tid; bytes flags[7][n]: each field found, stashed, "
     "complex, backward node, evaluate_function wrapper."},
    {NULL, NULL, 0, NULL}};

int native_add_names(PyObject *module) { return PyModule_AddFunctions(module, methods); }
