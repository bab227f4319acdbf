/* One window's ranges nested per thread, and the innermost range around each API call:
 * nvbridge.engine.window.build_tree in two passes over the rows, no sort.
 *
 * The window's rows come in output order (start, thread, longer first, push order), so each
 * thread's rows are already in the order a stack walk needs. A range that overlaps the innermost
 * open range of its thread without fitting inside it is crossing: kept out of the tree, as are
 * ranges ended on another thread. The NumPy version (intervals.Forest) gives the same columns;
 * tests/test_native_kernels.py holds the two to it.
 */
#include "native.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* -- thread keys -> dense indices (open addressing) ------------------------------------------- */

typedef struct {
    int64_t *keys;
    int32_t *vals;
    size_t cap; /* a power of two */
    int32_t count;
} KeyMap;

static int map_init(KeyMap *m) {
    m->cap = 64;
    m->count = 0;
    m->keys = malloc(m->cap * sizeof(int64_t));
    m->vals = malloc(m->cap * sizeof(int32_t));
    if (!m->keys || !m->vals) return -1;
    for (size_t i = 0; i < m->cap; i++) m->vals[i] = -1;
    return 0;
}

static void map_free(KeyMap *m) {
    free(m->keys);
    free(m->vals);
}

static int map_grow(KeyMap *m) {
    KeyMap bigger = {NULL, NULL, m->cap * 2, m->count};
    bigger.keys = malloc(bigger.cap * sizeof(int64_t));
    bigger.vals = malloc(bigger.cap * sizeof(int32_t));
    if (!bigger.keys || !bigger.vals) {
        map_free(&bigger);
        return -1;
    }
    for (size_t i = 0; i < bigger.cap; i++) bigger.vals[i] = -1;
    for (size_t i = 0; i < m->cap; i++) {
        if (m->vals[i] < 0) continue;
        size_t at = native_mix64((uint64_t)m->keys[i]) & (bigger.cap - 1);
        while (bigger.vals[at] >= 0) at = (at + 1) & (bigger.cap - 1);
        bigger.keys[at] = m->keys[i];
        bigger.vals[at] = m->vals[i];
    }
    map_free(m);
    *m = bigger;
    return 0;
}

/* The key's index, added if new (-2: out of memory); ``add`` 0: -1 if absent. */
static int32_t map_index(KeyMap *m, int64_t key, int add) {
    size_t at = native_mix64((uint64_t)key) & (m->cap - 1);
    while (m->vals[at] >= 0) {
        if (m->keys[at] == key) return m->vals[at];
        at = (at + 1) & (m->cap - 1);
    }
    if (!add) return -1;
    if ((size_t)(m->count + 1) * 2 > m->cap) {
        if (map_grow(m)) return -2;
        return map_index(m, key, add);
    }
    m->keys[at] = key;
    m->vals[at] = m->count;
    return m->count++;
}

/* -- the forest ------------------------------------------------------------------------------- */

typedef struct {
    const int64_t *start, *end;
    int32_t *offset;   /* per thread: first position in ``rows`` */
    int64_t *rows;     /* tree candidates grouped by thread, each group in window order */
    int64_t *position; /* window row -> its position in ``rows`` (-1: not a candidate) */
    int64_t *parent;
    uint8_t *crossing;
} Forest;

/* The innermost tree range of thread ``t`` containing [s, e], as a window row, or -1. */
static int64_t innermost(const Forest *f, int32_t t, int64_t s, int64_t e) {
    if (t < 0) return -1;
    int64_t lo = f->offset[t], hi = f->offset[t + 1];
    /* The last range of the thread starting at or before s. */
    int64_t a = lo, b = hi;
    while (a < b) {
        int64_t mid = a + (b - a) / 2;
        if (f->start[f->rows[mid]] <= s)
            a = mid + 1;
        else
            b = mid;
    }
    int64_t p = a - 1;
    if (p < lo) return -1;
    for (;;) {
        int64_t row = f->rows[p];
        if (!f->crossing[row] && f->end[row] >= e) return row;
        if (f->crossing[row]) { /* no parent: the previous range on the thread */
            p--;
            if (p < lo) return -1;
        } else {
            int64_t up = f->parent[row];
            if (up < 0) return -1;
            p = f->position[up];
        }
    }
}

static int check(Py_buffer *view, Py_ssize_t itemsize, Py_ssize_t n, const char *what) {
    if (view->len != n * itemsize) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes for %zd values", what, view->len, n);
        return -1;
    }
    return 0;
}

static PyObject *build_tree(PyObject *Py_UNUSED(module), PyObject *args) {
    Py_buffer b[7];
    memset(b, 0, sizeof b);
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5], &b[6])) return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = b[0].len / 8, m = b[4].len / 8;
    if (check(&b[1], 8, n, "start") || check(&b[2], 8, n, "end") || check(&b[3], 1, n, "cross") ||
        check(&b[5], 8, m, "api start") || check(&b[6], 8, m, "api end"))
        goto release;
    const int64_t *thread = b[0].buf, *start = b[1].buf, *end = b[2].buf;
    const uint8_t *cross = b[3].buf;
    const int64_t *a_thread = b[4].buf, *a_start = b[5].buf, *a_end = b[6].buf;

    int64_t *parent = malloc((size_t)n * 8 + 8), *depth = malloc((size_t)n * 8 + 8);
    int64_t *api_local = malloc((size_t)m * 8 + 8);
    uint8_t *flags = malloc((size_t)n * 2 + 2); /* in_tree, then crossing */
    int32_t *tidx = malloc((size_t)n * 4 + 4);
    int64_t *rows = malloc((size_t)n * 8 + 8), *position = malloc((size_t)n * 8 + 8);
    int64_t *stack = malloc((size_t)n * 8 + 8);
    int32_t *offset = NULL, *fill = NULL;
    KeyMap map = {NULL, NULL, 0, 0};
    int failed = !parent || !depth || !api_local || !flags || !tidx || !rows || !position || !stack ||
                 map_init(&map);
    if (!failed) {
        Py_BEGIN_ALLOW_THREADS
        uint8_t *in_tree = flags, *crossing = flags + n;
        /* Dense thread indices; tree candidates counted per thread. */
        for (Py_ssize_t i = 0; i < n && !failed; i++) {
            int32_t t = map_index(&map, thread[i], 1);
            if (t < 0) failed = 1;
            tidx[i] = t;
        }
        int32_t threads = map.count;
        offset = calloc((size_t)threads + 2, sizeof(int32_t));
        fill = calloc((size_t)threads + 1, sizeof(int32_t));
        failed = failed || !offset || !fill;
        if (!failed) {
            for (Py_ssize_t i = 0; i < n; i++)
                if (!cross[i]) offset[tidx[i] + 1]++;
            for (int32_t t = 0; t < threads; t++) offset[t + 1] += offset[t];
            for (Py_ssize_t i = 0; i < n; i++) {
                position[i] = -1;
                if (cross[i]) continue;
                int64_t at = offset[tidx[i]] + fill[tidx[i]]++;
                rows[at] = i;
                position[i] = at;
            }
            /* The stack walk, thread by thread (intervals.Forest._build_thread_exact). */
            for (Py_ssize_t i = 0; i < n; i++) {
                parent[i] = -1;
                depth[i] = 0;
                crossing[i] = 0;
            }
            for (int32_t t = 0; t < threads; t++) {
                int64_t top = 0;
                for (int64_t p = offset[t]; p < offset[t + 1]; p++) {
                    int64_t i = rows[p];
                    while (top && end[stack[top - 1]] < end[i] && end[stack[top - 1]] <= start[i]) top--;
                    if (top && end[stack[top - 1]] < end[i]) {
                        crossing[i] = 1;
                        continue;
                    }
                    parent[i] = top ? stack[top - 1] : -1;
                    depth[i] = top;
                    stack[top++] = i;
                }
            }
            Forest forest = {start, end, offset, rows, position, parent, crossing};
            /* Ranges outside the tree hang under the innermost tree range containing them. */
            for (Py_ssize_t i = 0; i < n; i++) in_tree[i] = (uint8_t)(!cross[i] && !crossing[i]);
            for (Py_ssize_t i = 0; i < n; i++) {
                if (in_tree[i]) continue;
                int64_t host = innermost(&forest, tidx[i], start[i], end[i]);
                parent[i] = host;
                depth[i] = host >= 0 ? depth[host] + 1 : 0;
            }
            for (Py_ssize_t j = 0; j < m; j++) {
                int32_t t = map_index(&map, a_thread[j], 0);
                api_local[j] = innermost(&forest, t, a_start[j], a_end[j]);
            }
        }
        Py_END_ALLOW_THREADS
    }
    free(tidx);
    free(rows);
    free(position);
    free(stack);
    free(offset);
    free(fill);
    map_free(&map);
    if (failed) {
        free(parent);
        free(depth);
        free(api_local);
        free(flags);
        PyErr_NoMemory();
        goto release;
    }
    {
        PyObject *p = native_buffer(parent, n * 8), *d = native_buffer(depth, n * 8);
        PyObject *a = native_buffer(api_local, m * 8), *f = native_buffer(flags, n * 2);
        if (p && d && a && f) result = PyTuple_Pack(4, p, d, f, a);
        Py_XDECREF(p);
        Py_XDECREF(d);
        Py_XDECREF(a);
        Py_XDECREF(f);
    }
release:
    for (int i = 0; i < 7; i++) PyBuffer_Release(&b[i]);
    return result;
}

/* roll_up(parent, carried, gpu_row, gpu_start, gpu_end, api_row, dur) -> int64 [8][n], or None
 * where a parent follows its child: self GPU ns, self GPU op count, API call count, children's
 * CPU ns, total GPU ns, total count, first GPU start, last GPU end (BIG / -BIG where none).
 * ``parent``: the tree parent (-1: none); rows come in output order, so every child follows its
 * parent and one backward pass rolls totals up (window.roll_up does it a depth level at a time,
 * and takes any order). */
static PyObject *roll_up(PyObject *Py_UNUSED(module), PyObject *args) {
    Py_buffer b[6];
    Py_ssize_t carried;
    long long big;
    memset(b, 0, sizeof b);
    if (!PyArg_ParseTuple(args, "y*ny*y*y*y*y*L", &b[0], &carried, &b[1], &b[2], &b[3], &b[4], &b[5], &big)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = b[0].len / 8, g = b[1].len / 8, m = b[4].len / 8;
    if (check(&b[2], 8, g, "gpu start") || check(&b[3], 8, g, "gpu end") || check(&b[5], 8, n, "dur")) goto release;
    const int64_t *parent = b[0].buf, *g_row = b[1].buf, *g_start = b[2].buf, *g_end = b[3].buf;
    const int64_t *a_row = b[4].buf, *dur = b[5].buf;
    for (Py_ssize_t i = 0; i < n; i++)
        if (parent[i] >= i) { /* a parent after its child: not output order */
            result = Py_NewRef(Py_None);
            goto release;
        }
    for (Py_ssize_t j = 0; j < g; j++)
        if (g_row[j] >= n) {
            PyErr_SetString(PyExc_ValueError, "GPU op row out of range");
            goto release;
        }
    for (Py_ssize_t j = 0; j < m; j++)
        if (a_row[j] >= n) {
            PyErr_SetString(PyExc_ValueError, "API call row out of range");
            goto release;
        }
    int64_t *out = calloc((size_t)(8 * n + 1), sizeof(int64_t));
    if (!out) {
        PyErr_NoMemory();
        goto release;
    }
    int64_t *self_gpu = out, *self_count = out + n, *api_count = out + 2 * n, *child_cpu = out + 3 * n;
    int64_t *total_gpu = out + 4 * n, *total_count = out + 5 * n, *first = out + 6 * n, *last = out + 7 * n;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        first[i] = big;
        last[i] = -big;
    }
    for (Py_ssize_t j = 0; j < g; j++) {
        int64_t r = g_row[j];
        if (r < 0) continue;
        self_gpu[r] += g_end[j] - g_start[j];
        self_count[r]++;
        if (g_start[j] < first[r]) first[r] = g_start[j];
        if (g_end[j] > last[r]) last[r] = g_end[j];
    }
    for (Py_ssize_t j = 0; j < m; j++)
        if (a_row[j] >= 0) api_count[a_row[j]]++;
    for (Py_ssize_t i = 0; i < n; i++) {
        total_gpu[i] = self_gpu[i];
        total_count[i] = self_count[i];
        /* A carried range's duration was counted in its parent's when it was new. */
        if (i >= carried && parent[i] >= 0) child_cpu[parent[i]] += dur[i];
    }
    for (Py_ssize_t i = n - 1; i >= 0; i--) {
        int64_t p = parent[i];
        if (p < 0) continue;
        total_gpu[p] += total_gpu[i];
        total_count[p] += total_count[i];
        if (first[i] < first[p]) first[p] = first[i];
        if (last[i] > last[p]) last[p] = last[i];
    }
    Py_END_ALLOW_THREADS
    result = native_buffer(out, 8 * n * 8);
release:
    for (int i = 0; i < 6; i++) PyBuffer_Release(&b[i]);
    return result;
}

static PyMethodDef methods[] = {
    {"build_tree", build_tree, METH_VARARGS,
     "build_tree(thread, start, end, cross, api_thread, api_start, api_end) -> "
     "(parent, depth, flags, api_local)\n\n"
     "A window's ranges (int64 thread keys, starts and ends in output order; cross: one byte "
     "per row, ended on another thread) nested per thread. Returns int64 parent rows (-1 root) "
     "and depths; flags: n bytes in_tree, then n bytes crossing; and the window row of each API "
     "call's innermost tree range (-1 none)."},
    {"roll_up", roll_up, METH_VARARGS,
     "roll_up(parent, carried, gpu_row, gpu_start, gpu_end, api_row, dur, big) -> int64 [8][n], "
     "or None where a parent follows its child (see native/tree.c)."},
    {NULL, NULL, 0, NULL}};

int native_add_tree(PyObject *module) { return PyModule_AddFunctions(module, methods); }
