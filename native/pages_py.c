/* nvbridge._native.Pages: the page reader's Python face (the walk is pages.c's). Arguments are
 * keyword-only and checked for shape and type (page_args.c); a scan runs with the GIL released. */
#include "scan.h"

#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

PyObject *native_damaged; /* nvbridge._native.Damaged */

/* -1 if the file changed since it was opened (its header's change counter), or its header cannot
 * be read: the geometry and the cached block would no longer hold. */
static int unchanged(Pages *p) {
    unsigned char h[4];
    return pread(p->fd, h, 4, 24) == 4 && be32(h) == p->changes ? 0 : -1;
}

/* A scan of ``self`` from page ``root`` with its filters parsed: check the root, allocate the
 * per-row buffers. 0, or -1 with an exception set. */
static int scan_ready(Scan *s, Pages *self, long long root) {
    s->p = self;
    s->leaf_depth = MAX_DEPTH;
    if (self->fd < 0 || self->busy) {
        PyErr_SetString(native_unreadable, self->fd < 0 ? "the page reader is closed" : "the page reader is busy");
        return -1;
    }
    int fields[] = {s->member.field, s->bound.field, s->alias};
    for (int i = 0; i < 3; i++)
        if (fields[i] + 1 > s->npos) s->npos = fields[i] + 1;
    if (root < 1 || root > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "a root page out of range");
        return -1;
    }
    s->serial = malloc((size_t)(s->npos + 1) * sizeof(uint64_t));
    s->offset = malloc((size_t)(s->npos + 1) * sizeof(uint32_t));
    s->overflow = malloc(self->page_size);
    s->scratch = malloc(page_scratch_entries(self->page_size) * sizeof(uint32_t));
    if (!s->serial || !s->offset || !s->overflow || !s->scratch) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* Walk the b-tree from ``root``, the GIL released; 0, or -1 with Damaged, Unreadable or
 * MemoryError set. */
static int scan_run(Scan *s, long long root) {
    int status;
    s->p->busy = 1; /* close() and __init__() refuse meanwhile: the scan uses the file and block */
    Py_BEGIN_ALLOW_THREADS
    status = unchanged(s->p) ? SCAN_FAIL : SCAN_OK;
    if (status != SCAN_OK) s->error = "the file changed since it was opened";
    else if (s->cols && columns_grow(s->cols, s->ncols, s->cap)) status = SCAN_FAIL;
    else status = scan_walk(s, (uint32_t)root);
    Py_END_ALLOW_THREADS
    s->p->busy = 0;
    if (status == SCAN_OK) return 0;
    if (!s->error)
        PyErr_NoMemory();
    else if (s->damaged)
        PyErr_Format(native_damaged, "page %u: %s", (unsigned)s->bad_page, s->error);
    else
        PyErr_Format(native_unreadable, "page %u onwards: %s", (unsigned)root, s->error);
    return -1;
}

static void scan_free(Scan *s) {
    if (s->cols) columns_free(s->cols, s->ncols);
    for (int d = 0; d < MAX_DEPTH; d++) free(s->levels[d]);
    free(s->payload);
    free(s->overflow);
    free(s->serial);
    free(s->offset);
    free(s->scratch);
    free(s->member.values);
}

static PyObject *int_or_none(int has, int64_t v) { return has ? PyLong_FromLongLong(v) : Py_NewRef(Py_None); }

/* The scan's (passed, least rowid or None, greatest or None) after ``first`` (stolen): the rows
 * inside the spans it passed, kept or not, for the caller's cross-check. */
static PyObject *with_tally(const Scan *s, PyObject *first, PyObject *second) {
    if (!first || !second) {
        Py_XDECREF(first);
        Py_XDECREF(second);
        return NULL;
    }
    return Py_BuildValue("(NNLNN)", first, second, (long long)s->passed, int_or_none(s->passed > 0, s->seen_lo),
                         int_or_none(s->passed > 0, s->seen_hi));
}

static PyObject *Pages_scan(Pages *self, PyObject *args, PyObject *kwds) {
    static char *keywords[] = {"root", "positions", "kinds", "spans", "alias", "member", "bound", "first", "count", NULL};
    long long root = 0, first = 0, count = -1;
    PyObject *positions = NULL, *spans = Py_None, *member = Py_None, *bound = Py_None;
    const char *kinds = NULL;
    Scan s = {.limit = -1, .cap = 1 << 16, .alias = -1};
    SpansArg sp = {.n = -1};
    int *field = NULL;
    PyObject *out = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|$LOsOiOOLL", keywords, &root, &positions, &kinds, &spans, &s.alias,
                                     &member, &bound, &first, &count))
        return NULL;
    if (!positions || !kinds) {
        PyErr_SetString(PyExc_TypeError, "scan() needs root, positions and kinds");
        return NULL;
    }
    int64_t window_lo = first, window_hi = INT64_MAX;
    int window = count >= 0;
    if (s.alias < -1 || s.alias > MAX_POSITION) {
        PyErr_SetString(PyExc_ValueError, "alias: a record position out of range");
        return NULL;
    }
    if (arg_positions(positions, &field, &s.ncols) || arg_spans(spans, &sp) || arg_member(member, &s.member) ||
        arg_bound(bound, &s.bound))
        goto done;
    if ((size_t)s.ncols != strlen(kinds)) {
        PyErr_SetString(PyExc_ValueError, "one position per column kind");
        goto done;
    }
    for (int c = 0; c < s.ncols; c++)
        if (field[c] + 1 > s.npos) s.npos = field[c] + 1;
    s.field = field;
    if (sp.n >= 0) {
        s.span_lo = sp.lo, s.span_hi = sp.hi, s.nspans = sp.n;
    }
    if (window) { /* rows from ``first`` on, ``count`` of them: spans are not taken */
        if (sp.n >= 0) {
            PyErr_SetString(PyExc_ValueError, "a window takes no spans");
            goto done;
        }
        s.span_lo = &window_lo, s.span_hi = &window_hi, s.nspans = 1, s.limit = count;
    }
    if (!(s.cols = columns_new(kinds, s.ncols)) || scan_ready(&s, self, root) || scan_run(&s, root)) goto done;
    out = with_tally(&s, columns_list(s.cols, s.ncols, s.n), int_or_none(window && s.has_next, s.next));
done:
    scan_free(&s);
    free(sp.buf);
    free(field);
    return out;
}

/* chunk_spans' buffer [5][n], its chunks initialized. */
static int64_t *chunk_buffer(Chunks *c, Py_ssize_t n) {
    int64_t *buf = malloc((size_t)(5 * n + 1) * sizeof(int64_t));
    if (!buf) return (int64_t *)PyErr_NoMemory();
    c->count = buf, c->lo = buf + n, c->hi = buf + 2 * n, c->nulls = buf + 3 * n, c->latest = buf + 4 * n;
    for (Py_ssize_t i = 0; i < n; i++) {
        c->count[i] = c->nulls[i] = 0;
        c->lo[i] = INT64_MAX;
        c->hi[i] = c->latest[i] = INT64_MIN;
    }
    return buf;
}

static PyObject *Pages_chunk_spans(Pages *self, PyObject *args, PyObject *kwds) {
    static char *keywords[] = {"root", "first", "last", "size", "n", "start", "latest", "gate", "gates", "alias", "member", NULL};
    long long root = 0, first = 0, last = -1, size = 0;
    Py_ssize_t n = -1;
    int start = -1, latest_at = -1, gate_at = -1, alias = -1;
    PyObject *gate = NULL, *member = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|$LLLLniiiOiO", keywords, &root, &first, &last, &size, &n, &start,
                                     &latest_at, &gate_at, &gate, &alias, &member))
        return NULL;
    int positions[] = {start, latest_at, gate_at, alias};
    for (int i = 0; i < 4; i++)
        if (positions[i] < -1 || positions[i] > MAX_POSITION) {
            PyErr_SetString(PyExc_ValueError, "a record position out of range");
            return NULL;
        }
    if (size <= 0 || n < 0 || n > (PY_SSIZE_T_MAX / 8 - 1) / 5 || start < 0) {
        PyErr_SetString(PyExc_ValueError, "chunk size, count and start position are required and in range");
        return NULL;
    }
    Chunks c = {.first = first, .size = size, .n = n, .start = start, .latest_at = latest_at, .gate_at = gate_at};
    Scan s = {.limit = -1, .alias = alias, .chunks = &c, .npos = 1 + (start > latest_at ? start : latest_at)};
    if (gate_at + 1 > s.npos) s.npos = gate_at + 1;
    int64_t lo = first, hi = last, *gates = NULL, *buf = NULL;
    s.span_lo = &lo, s.span_hi = &hi, s.nspans = 1;
    PyObject *out = NULL;
    if (arg_member(member, &s.member) || (gate && arg_ints(gate, "gates", &gates, &c.ngates))) goto done;
    s.bound.field = -1;
    c.gates = gates;
    if (!(buf = chunk_buffer(&c, n)) || scan_ready(&s, self, root) || scan_run(&s, root)) goto done;
    PyObject *spans = c.untyped ? Py_NewRef(Py_None) : native_buffer(buf, (Py_ssize_t)(5 * n * sizeof(int64_t)));
    if (!c.untyped) buf = NULL;
    out = spans ? Py_BuildValue("(NLNN)", spans, (long long)s.passed, int_or_none(s.passed > 0, s.seen_lo),
                                int_or_none(s.passed > 0, s.seen_hi))
                : NULL;
done:
    scan_free(&s);
    free(buf);
    free(gates);
    return out;
}

/* Forget the file: its descriptor, its geometry, the block cache and the survey. */
static void forget(Pages *self) {
    if (self->fd >= 0) close(self->fd);
    self->fd = -1;
    free(self->block);
    free(self->marks);
    free(self->owners);
    self->block = NULL;
    self->marks = NULL;
    self->owners = NULL;
    self->owners_cap = self->owners_n = 0;
    self->block_count = self->page_size = self->usable = self->pages = self->changes = 0;
}

static PyObject *Pages_close(Pages *self, PyObject *Py_UNUSED(ignored)) {
    if (self->busy) {
        PyErr_SetString(native_unreadable, "the page reader is busy");
        return NULL;
    }
    forget(self);
    Py_RETURN_NONE;
}

/* Why the 100-byte header ``h`` of a ``size``-byte file is not one the page reader reads (NULL:
 * it is); ``pages``: its page count. SQLite checks these itself when it opens the file. */
static const char *header_refusal(const unsigned char *h, uint64_t size, uint64_t *pages) {
    if (memcmp(h, "SQLite format 3", 16)) return "not an SQLite file";
    uint32_t page_size = be16(h + 16) == 1 ? 65536 : be16(h + 16);
    if (page_size < 512 || (page_size & (page_size - 1))) return "a page size SQLite does not write";
    if (h[18] != 1 || h[19] != 1) return "a file in WAL mode (its pages may be in the -wal file)";
    if (be32(h + 56) != 1) return "text that is not UTF-8";
    if (page_size - h[20] < 480) return "a reserved area SQLite does not write";
    if (h[21] != 64 || h[22] != 32 || h[23] != 32) return "payload fractions SQLite does not write";
    /* The header's page count holds if the last writer was a current SQLite (it then matches the
     * change counter); past the file's end, the file is cut short. */
    uint64_t in_file = size / page_size;
    *pages = be32(h + 28);
    int counted = *pages && be32(h + 92) == be32(h + 24);
    if (counted && *pages > in_file) return "a file shorter than its header says";
    if (!counted) *pages = in_file;
    return NULL;
}

static int Pages_init(Pages *self, PyObject *args, PyObject *kwds) {
    static char *keywords[] = {"path", NULL};
    PyObject *path_obj;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O&", keywords, PyUnicode_FSConverter, &path_obj)) return -1;
    if (self->busy) {
        Py_DECREF(path_obj);
        PyErr_SetString(native_unreadable, "the page reader is busy");
        return -1;
    }
    forget(self);
    unsigned char h[100] = {0};
    struct stat st;
    const char *why = NULL;
    int fd;
    Py_BEGIN_ALLOW_THREADS
    fd = open(PyBytes_AS_STRING(path_obj), O_RDONLY | O_CLOEXEC);
    if (fd < 0) why = "cannot open the file";
    else if (fstat(fd, &st) || pread(fd, h, 100, 0) != 100) why = "cannot read the file's header";
    Py_END_ALLOW_THREADS
    Py_DECREF(path_obj);
    uint64_t pages = 0;
    if (!why) why = header_refusal(h, (uint64_t)st.st_size, &pages);
    uint32_t page_size = be16(h + 16) == 1 ? 65536 : be16(h + 16);
    if (!why && !(self->block = malloc((size_t)BLOCK_PAGES * page_size))) why = "out of memory";
    if (why) {
        if (fd >= 0) close(fd);
        PyErr_Format(native_unreadable, "%s", why);
        return -1;
    }
    self->fd = fd;
    self->page_size = page_size;
    self->usable = page_size - h[20];
    self->pages = pages > UINT32_MAX ? UINT32_MAX : (uint32_t)pages;
    self->changes = be32(h + 24);
    self->free_first = be32(h + 32);
    self->free_count = be32(h + 36);
    self->autovacuum = be32(h + 52);
    return 0;
}

static PyObject *Pages_new(PyTypeObject *type, PyObject *Py_UNUSED(args), PyObject *Py_UNUSED(kwds)) {
    Pages *self = (Pages *)type->tp_alloc(type, 0);
    if (self) self->fd = -1;
    return (PyObject *)self;
}

static void Pages_dealloc(Pages *self) {
    forget(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Pages_methods[] = {
    {"scan", (PyCFunction)(void (*)(void))Pages_scan, METH_VARARGS | METH_KEYWORDS,
     "scan(*, root, positions, kinds, spans=None, alias=-1, member=None, bound=None, first=0, count=-1)\n"
     "-> (columns, next, passed, least, greatest)\n\n"
     "The rows of the table b-tree at page ``root``, in rowid order: per output column its record "
     "position (a tuple; -1: the rowid) and kind (as Reader.read). ``spans``: a tuple of sorted disjoint "
     "inclusive rowid (lo, hi) pairs, or None for all; ``alias``: the INTEGER PRIMARY KEY's position; "
     "``member``: (position, values tuple, nulls pass) or None; ``bound``: (position, lo or None, hi or "
     "None, nulls pass) for lo <= value < hi, or None. With ``count`` >= 0 (spans None): a window, the "
     "rows from rowid ``first`` on until ``count`` rows (kept or not) were passed; ``next`` is the rowid "
     "of the row after it (None otherwise). ``passed``, ``least``, ``greatest``: the rows inside the "
     "spans it passed, kept or not. Raises Damaged on a page SQLite's checks call corrupt, Unreadable "
     "on what it does not read (SQLite then reads it)."},
    {"chunk_spans", (PyCFunction)(void (*)(void))Pages_chunk_spans, METH_VARARGS | METH_KEYWORDS,
     "chunk_spans(*, root, first, last, size, n, start, latest, gate, gates, alias, member)\n"
     "-> (int64 buffer [5][n] or None, passed, least, greatest)\n\n"
     "Reader.chunk_spans over rowids first..last of the rows ``member`` keeps (as scan's): ``start``, "
     "``latest`` and ``gate`` are record positions (-1: none); latest counts only where the gate "
     "column is in ``gates`` (a tuple). None where a start or latest is not an integer."},
    {"survey", (PyCFunction)(void (*)(void))Pages_survey, METH_VARARGS | METH_KEYWORDS,
     "survey(roots, *, known=None) -> (marks, leaves)\n\n"
     "Check the file's b-trees (page 1's and ``roots``, a tuple of every other root page) and free "
     "list as PRAGMA integrity_check marks them: each page used once, interior pages sound, no "
     "b-tree page outside them; scans then refuse an overflow page that is a b-tree or free page. "
     "``leaves``: each root's leaf pages (empty with ``known``). "
     "``known``: another Pages' survey of the same file, taken as it is. Raises Damaged with args "
     "(what, root): the b-tree's root page, 0 for the free list or a page nothing refers to."},
    {"close", (PyCFunction)Pages_close, METH_NOARGS, "Close the file."},
    {NULL, NULL, 0, NULL}};

static PyTypeObject PagesType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nvbridge._native.Pages",
    .tp_basicsize = sizeof(Pages),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Pages(path): an SQLite file's table b-trees, read-only, for one thread.",
    .tp_new = Pages_new,
    .tp_init = (initproc)Pages_init,
    .tp_dealloc = (destructor)Pages_dealloc,
    .tp_methods = Pages_methods,
};

int native_add_pages(PyObject *module) {
    native_damaged = PyErr_NewException("nvbridge._native.Damaged", NULL, NULL);
    if (!native_damaged || PyModule_AddObjectRef(module, "Damaged", native_damaged) < 0) return -1;
    if (PyType_Ready(&PagesType) < 0) return -1;
    return PyModule_AddObjectRef(module, "Pages", (PyObject *)&PagesType);
}
