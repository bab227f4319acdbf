/* Chrome trace event lines, row by row, from column buffers: nvbridge.export.chrome_text builds
 * the same lines with Arrow string kernels, a full copy of every line per part joined (2.2 s of
 * CPU at 2M NVTX rows; this loop writes each byte once).
 *
 * A line is a list of segments, each a tuple whose first item is its kind:
 *   (LITERAL, bytes)
 *   (INT, int64 values, valid or None, prefix, null or None)
 *   (MICROS, int64 ns, origin)                        ns - origin as microseconds, 3 decimals
 *   (TEXT, int32 offsets, data, valid or None, prefix, null or None)    a JSON string literal
 *   (DICT, int32 indices, valid or None, int32 offsets, data, prefix, null or None)
 *   (CHOICE, uint8 choice, (bytes, ...))
 *   (IF, uint8 valid, bytes)                         the bytes where valid
 *   (RAW, int32 offsets, data, valid or None, prefix, null or None)     text as it is
 * ``valid`` is one byte per row; a null value writes ``prefix + null``, or nothing when ``null``
 * is None. Offsets hold n + 1 entries (a slice's own). Text that is not UTF-8 raises ValueError:
 * the caller then takes the Arrow path, which replaces it.
 */
#include "native.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { LITERAL, INT, MICROS, TEXT, DICT, CHOICE, IF, RAW };
#define MAX_SEGMENTS 64
#define MAX_BUFFERS 4
#define MAX_CHOICES 8

typedef struct {
    int kind;
    Py_buffer views[MAX_BUFFERS];
    int nviews;
    const int64_t *ints;
    const int32_t *offsets, *dict_offsets, *indices;
    const char *data;
    const uint8_t *valid, *choice;
    const char *prefix, *null, *text;
    Py_ssize_t prefix_len, null_len, text_len;
    int has_null;
    int64_t origin;
    const char *options[MAX_CHOICES];
    Py_ssize_t option_len[MAX_CHOICES];
    int noptions;
} Segment;

typedef struct {
    char *buf;
    size_t len, cap;
} Out;

static int reserve(Out *o, size_t extra) { return native_reserve(&o->buf, &o->cap, o->len + extra, 1 << 20); }

static void put(Out *o, const char *s, size_t n) {
    memcpy(o->buf + o->len, s, n);
    o->len += n;
}

static const char DIGIT_PAIRS[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

/* Decimal digits of v (at most 20 and a sign), two at a time. */
static void put_int(Out *o, int64_t v) {
    char tmp[24];
    int i = 24;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    while (u >= 100) {
        unsigned d = (unsigned)(u % 100) * 2;
        u /= 100;
        tmp[--i] = DIGIT_PAIRS[d + 1];
        tmp[--i] = DIGIT_PAIRS[d];
    }
    if (u >= 10) {
        tmp[--i] = DIGIT_PAIRS[u * 2 + 1];
        tmp[--i] = DIGIT_PAIRS[u * 2];
    } else {
        tmp[--i] = (char)('0' + u);
    }
    if (v < 0) tmp[--i] = '-';
    put(o, tmp + i, (size_t)(24 - i));
}

/* ns as microseconds with three decimals, divided as NumPy's divmod does (floor). */
static void put_micros(Out *o, int64_t ns) {
    int64_t q = ns / 1000, r = ns % 1000;
    if (r < 0) {
        r += 1000;
        q -= 1;
    }
    put_int(o, q);
    char frac[4] = {'.', (char)('0' + r / 100), (char)('0' + r / 10 % 10), (char)('0' + r % 10)};
    put(o, frac, 4);
}

/* A JSON string literal: quotes, backslashes and control characters escaped (as escape() does). */
static int put_json(Out *o, const char *s, size_t n) {
    if (!native_utf8_valid((const unsigned char *)s, n)) return -2;
    if (reserve(o, n * 6 + 2)) return -1;
    o->buf[o->len++] = '"';
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            o->buf[o->len++] = '\\';
            o->buf[o->len++] = (char)c;
        } else if (c < 0x20 || c == 0x7f) {
            char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            put(o, esc, 6);
        } else {
            o->buf[o->len++] = (char)c;
        }
    }
    o->buf[o->len++] = '"';
    return 0;
}

static int view(PyObject *obj, Segment *seg, const void **out, Py_ssize_t *len) {
    if (obj == Py_None) {
        *out = NULL;
        if (len) *len = 0;
        return 0;
    }
    if (seg->nviews == MAX_BUFFERS) {
        PyErr_SetString(PyExc_ValueError, "too many buffers in a segment");
        return -1;
    }
    Py_buffer *v = &seg->views[seg->nviews];
    if (PyObject_GetBuffer(obj, v, PyBUF_C_CONTIGUOUS) < 0) return -1;
    seg->nviews++;
    *out = v->buf;
    if (len) *len = v->len;
    return 0;
}

static int bytes_of(PyObject *obj, const char **s, Py_ssize_t *n) {
    if (obj == Py_None) {
        *s = NULL;
        *n = 0;
        return 0;
    }
    if (!PyBytes_Check(obj)) {
        PyErr_SetString(PyExc_TypeError, "literal text must be bytes");
        return -1;
    }
    *s = PyBytes_AS_STRING(obj);
    *n = PyBytes_GET_SIZE(obj);
    return 0;
}

/* Check that a buffer holds at least ``need`` bytes. */
static int enough(Py_ssize_t have, Py_ssize_t need, const char *what) {
    if (have < need) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes, %zd needed", what, have, need);
        return -1;
    }
    return 0;
}

static int parse_segment(PyObject *item, Segment *seg, Py_ssize_t n) {
    memset(seg, 0, sizeof *seg);
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) < 2) {
        PyErr_SetString(PyExc_TypeError, "a segment is a tuple (kind, ...)");
        return -1;
    }
    seg->kind = (int)PyLong_AsLong(PyTuple_GET_ITEM(item, 0));
    Py_ssize_t size = PyTuple_GET_SIZE(item), len;
    const void *p;
#define ARG(i) PyTuple_GET_ITEM(item, (i))
#define NEED(k)                                                                   \
    if (size != (k)) {                                                            \
        PyErr_Format(PyExc_TypeError, "segment kind %d takes %d items", seg->kind, (k)); \
        return -1;                                                                \
    }
    switch (seg->kind) {
    case LITERAL:
        NEED(2);
        return bytes_of(ARG(1), &seg->text, &seg->text_len);
    case INT:
        NEED(5);
        if (view(ARG(1), seg, &p, &len) || enough(len, n * 8, "ints")) return -1;
        seg->ints = p;
        if (view(ARG(2), seg, &p, &len) || (p && enough(len, n, "valid"))) return -1;
        seg->valid = p;
        seg->has_null = ARG(4) != Py_None;
        return bytes_of(ARG(3), &seg->prefix, &seg->prefix_len) || bytes_of(ARG(4), &seg->null, &seg->null_len);
    case MICROS:
        NEED(3);
        if (view(ARG(1), seg, &p, &len) || enough(len, n * 8, "times")) return -1;
        seg->ints = p;
        seg->origin = PyLong_AsLongLong(ARG(2));
        return PyErr_Occurred() ? -1 : 0;
    case TEXT:
    case RAW:
        NEED(6);
        if (view(ARG(1), seg, &p, &len) || enough(len, (n + 1) * 4, "offsets")) return -1;
        seg->offsets = p;
        if (view(ARG(2), seg, &p, &len)) return -1;
        seg->data = p;
        if (n && (seg->offsets[0] < 0 || seg->offsets[n] > len || seg->offsets[n] < seg->offsets[0])) {
            PyErr_SetString(PyExc_ValueError, "offsets past the data");
            return -1;
        }
        if (view(ARG(3), seg, &p, &len) || (p && enough(len, n, "valid"))) return -1;
        seg->valid = p;
        seg->has_null = ARG(5) != Py_None;
        return bytes_of(ARG(4), &seg->prefix, &seg->prefix_len) || bytes_of(ARG(5), &seg->null, &seg->null_len);
    case DICT: {
        NEED(7);
        if (view(ARG(1), seg, &p, &len) || enough(len, n * 4, "indices")) return -1;
        seg->indices = p;
        if (view(ARG(2), seg, &p, &len) || (p && enough(len, n, "valid"))) return -1;
        seg->valid = p;
        Py_ssize_t dict_len;
        if (view(ARG(3), seg, &p, &dict_len)) return -1;
        seg->dict_offsets = p;
        if (view(ARG(4), seg, &p, &len)) return -1;
        seg->data = p;
        Py_ssize_t entries = dict_len / 4 - 1;
        if (entries < 0 || (entries && seg->dict_offsets[entries] > len)) {
            PyErr_SetString(PyExc_ValueError, "dictionary offsets past the data");
            return -1;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            if ((!seg->valid || seg->valid[i]) && (seg->indices[i] < 0 || seg->indices[i] >= entries)) {
                PyErr_SetString(PyExc_ValueError, "dictionary index out of range");
                return -1;
            }
        }
        seg->has_null = ARG(6) != Py_None;
        return bytes_of(ARG(5), &seg->prefix, &seg->prefix_len) || bytes_of(ARG(6), &seg->null, &seg->null_len);
    }
    case CHOICE: {
        NEED(3);
        if (view(ARG(1), seg, &p, &len) || enough(len, n, "choice")) return -1;
        seg->choice = p;
        PyObject *opts = ARG(2);
        if (!PyTuple_Check(opts) || PyTuple_GET_SIZE(opts) < 1 || PyTuple_GET_SIZE(opts) > MAX_CHOICES) {
            PyErr_SetString(PyExc_TypeError, "choices: a tuple of 1 to 8 bytes");
            return -1;
        }
        seg->noptions = (int)PyTuple_GET_SIZE(opts);
        for (int i = 0; i < seg->noptions; i++)
            if (bytes_of(PyTuple_GET_ITEM(opts, i), &seg->options[i], &seg->option_len[i])) return -1;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (seg->choice[i] >= seg->noptions) {
                PyErr_SetString(PyExc_ValueError, "choice out of range");
                return -1;
            }
        }
        return 0;
    }
    case IF:
        NEED(3);
        if (view(ARG(1), seg, &p, &len) || enough(len, n, "valid")) return -1;
        seg->valid = p;
        return bytes_of(ARG(2), &seg->text, &seg->text_len);
    default:
        PyErr_Format(PyExc_ValueError, "unknown segment kind %d", seg->kind);
        return -1;
    }
#undef ARG
#undef NEED
}

/* One row's segments; -1 out of memory, -2 text that is not UTF-8. */
static int put_row(Out *o, const Segment *segs, int nsegs, Py_ssize_t r) {
    for (int s = 0; s < nsegs; s++) {
        const Segment *g = &segs[s];
        switch (g->kind) {
        case LITERAL:
            if (reserve(o, (size_t)g->text_len)) return -1;
            put(o, g->text, (size_t)g->text_len);
            break;
        case MICROS:
            if (reserve(o, 32)) return -1;
            put_micros(o, g->ints[r] - g->origin);
            break;
        case CHOICE: {
            int c = g->choice[r];
            if (reserve(o, (size_t)g->option_len[c])) return -1;
            put(o, g->options[c], (size_t)g->option_len[c]);
            break;
        }
        case IF:
            if (g->valid[r]) {
                if (reserve(o, (size_t)g->text_len)) return -1;
                put(o, g->text, (size_t)g->text_len);
            }
            break;
        default: {
            int valid = !g->valid || g->valid[r];
            if (!valid && !g->has_null) break;
            if (reserve(o, (size_t)(g->prefix_len + g->null_len) + 32)) return -1;
            put(o, g->prefix, (size_t)g->prefix_len);
            if (!valid) {
                put(o, g->null, (size_t)g->null_len);
                break;
            }
            if (g->kind == INT) {
                put_int(o, g->ints[r]);
            } else {
                const int32_t *off = g->kind == DICT ? g->dict_offsets : g->offsets;
                Py_ssize_t at = g->kind == DICT ? g->indices[r] : r;
                const char *s = g->data + off[at];
                size_t n = (size_t)(off[at + 1] - off[at]);
                if (g->kind == RAW) {
                    if (reserve(o, n)) return -1;
                    put(o, s, n);
                } else {
                    int err = put_json(o, s, n);
                    if (err) return err;
                }
            }
        }
        }
    }
    return 0;
}

static PyObject *format_lines(PyObject *Py_UNUSED(module), PyObject *args) {
    Py_ssize_t n;
    PyObject *list;
    if (!PyArg_ParseTuple(args, "nO!", &n, &PyList_Type, &list)) return NULL;
    Py_ssize_t nsegs = PyList_GET_SIZE(list);
    if (n < 0 || nsegs > MAX_SEGMENTS) {
        PyErr_SetString(PyExc_ValueError, "rows must be >= 0 and segments at most 64");
        return NULL;
    }
    Segment *segs = calloc((size_t)(nsegs ? nsegs : 1), sizeof(Segment));
    if (!segs) return PyErr_NoMemory();
    int parsed = 0, status = 0;
    PyObject *result = NULL;
    for (; parsed < nsegs; parsed++)
        if (parse_segment(PyList_GET_ITEM(list, parsed), &segs[parsed], n) < 0) {
            parsed++;
            goto done;
        }
    Out o = {NULL, 0, 0};
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = 0; r < n && !status; r++) status = put_row(&o, segs, (int)nsegs, r);
    Py_END_ALLOW_THREADS
    if (status == -1) {
        free(o.buf);
        PyErr_NoMemory();
    } else if (status == -2) {
        free(o.buf);
        PyErr_SetString(PyExc_ValueError, "text that is not UTF-8");
    } else {
        result = native_buffer(o.buf, (Py_ssize_t)o.len);
    }
done:
    for (int i = 0; i < parsed; i++)
        for (int v = 0; v < segs[i].nviews; v++) PyBuffer_Release(&segs[i].views[v]);
    free(segs);
    return result;
}

static PyMethodDef methods[] = {
    {"format_lines", format_lines, METH_VARARGS,
     "format_lines(n, segments) -> buffer of n lines (see native/lines.c for the segments)."},
    {NULL, NULL, 0, NULL}};

int native_add_lines(PyObject *module) {
    if (PyModule_AddFunctions(module, methods) < 0) return -1;
    static const char *names[] = {"LITERAL", "INT", "MICROS", "TEXT", "DICT", "CHOICE", "IF", "RAW"};
    for (int i = 0; i < 8; i++)
        if (PyModule_AddIntConstant(module, names[i], i) < 0) return -1;
    return 0;
}
