/* The file's b-trees and free list, page by page, once per file (Pages.survey).
 *
 * Why: a page can look sound alone and still be wrong where it sits. A child pointer moved to
 * another table's leaf whose rowids fit its slot, or to a freed page still holding old rows,
 * reads as rows that belong elsewhere; an interior page that lost a cell leaves a subtree
 * nothing reaches, and its rows vanish. SQLite's reads see none of this; PRAGMA
 * integrity_check does, by marking every page each b-tree and the free list use ("2nd
 * reference to page", "never used"). The survey makes those marks for the interior pages and
 * the free list (a few thousand page reads for a 2 GB file: leaves are marked from their
 * parents, not read), checks each interior page as page_check does, and refuses a page used
 * twice and a b-tree page no b-tree or free list refers to. The scans then read leaves only
 * where the survey marked them, and refuse an overflow page it marked.
 */
#include "pages.h"

#include <string.h>
#include <unistd.h>

#define LOCK_BYTE 0x40000000u /* SQLite's PENDING_BYTE: its page is never used */

typedef struct {
    Pages *p;
    uint8_t *marks;
    unsigned char *levels[MAX_DEPTH];
    uint32_t *scratch;
    const char *why; /* NULL with a failure: out of memory */
    uint32_t at;     /* the page it is about */
    uint32_t root;   /* the b-tree it is in (0: the free list, or none) */
    uint64_t leaves; /* leaf pages of the b-tree being walked */
} Survey;

static int wrong(Survey *v, uint32_t pgno, const char *why) {
    v->why = why;
    v->at = pgno;
    return -1;
}

int owners_claim(Pages *p, uint32_t page, uint32_t root, int64_t rowid) {
    if (2 * (p->owners_n + 1) > p->owners_cap) { /* grow, rehash: open addressing at most half full */
        size_t cap = p->owners_cap ? 2 * p->owners_cap : 256;
        Owner *grown = calloc(cap, sizeof(Owner));
        if (!grown) return -1;
        for (size_t i = 0; i < p->owners_cap; i++) {
            if (!p->owners[i].page) continue;
            size_t at = native_mix64(p->owners[i].page) & (cap - 1);
            while (grown[at].page) at = (at + 1) & (cap - 1);
            grown[at] = p->owners[i];
        }
        free(p->owners);
        p->owners = grown;
        p->owners_cap = cap;
    }
    size_t at = native_mix64(page) & (p->owners_cap - 1);
    while (p->owners[at].page && p->owners[at].page != page) at = (at + 1) & (p->owners_cap - 1);
    Owner *o = &p->owners[at];
    if (o->page) return o->root != root || o->rowid != rowid;
    *o = (Owner){page, root, rowid};
    p->owners_n++;
    return 0;
}

/* Page ``pgno`` is used once more: -1 past the file's end or used already. */
static int use(Survey *v, uint32_t pgno) {
    if (pgno < 1 || pgno > v->p->pages) return wrong(v, pgno, "a page number past the end of the file");
    if (marked(v->marks, pgno)) return wrong(v, pgno, "a page used twice (by two b-trees, a b-tree and the free list, or twice in one)");
    v->marks[pgno / 8] |= (uint8_t)(1u << (pgno % 8));
    return 0;
}

/* Page ``pgno`` read into the buffer of ``depth`` and checked. */
static int load(Survey *v, uint32_t pgno, int depth, PageHead *h) {
    if (depth >= MAX_DEPTH) return wrong(v, pgno, "a b-tree deeper than SQLite reads");
    if (!v->levels[depth] && !(v->levels[depth] = malloc(v->p->page_size))) return wrong(v, pgno, NULL);
    if (pages_read(v->p, pgno, v->levels[depth])) return wrong(v, pgno, "a page number past the end of the file");
    const char *why = page_check(v->levels[depth], pgno, v->p->page_size, v->p->usable, depth == 0, h, v->scratch);
    return why ? wrong(v, pgno, why) : 0;
}

/* Child ``i`` of an interior page (``ncells``: the right-most child). */
static uint32_t child_at(const unsigned char *page, const PageHead *h, uint32_t i) {
    return i < h->ncells ? be32(page + be16(page + h->cells + 2 * i)) : be32(page + h->head + 8);
}

/* The depth of the leaves of the b-tree at ``root``, down its first children. */
static int leaf_depth(Survey *v, uint32_t root, int *out) {
    PageHead h;
    uint32_t pgno = root;
    for (int depth = 0;; depth++) {
        if (pgno < 1 || pgno > v->p->pages) return wrong(v, pgno, "a page number past the end of the file");
        if (load(v, pgno, depth, &h)) return -1;
        if (h.type >= 0x0A) {
            *out = depth;
            return 0;
        }
        pgno = child_at(v->levels[depth], &h, 0);
    }
}

/* Page ``pgno`` at ``depth`` and the pages below it: each marked once, the interior ones (of
 * ``family``, 0x05 or 0x02) read and checked; leaves (at depth ``leaves``) only marked. */
static int walk(Survey *v, uint32_t pgno, int depth, int leaves, uint8_t family) {
    PageHead h;
    if (use(v, pgno)) return -1;
    if (depth == leaves) return v->leaves++, 0;
    if (load(v, pgno, depth, &h)) return -1;
    if (h.type != family) return wrong(v, pgno, h.type >= 0x0A ? "leaves at different depths" : "a b-tree of two kinds");
    for (uint32_t i = 0; i <= h.ncells; i++)
        if (walk(v, child_at(v->levels[depth], &h, i), depth + 1, leaves, family)) return -1;
    return 0;
}

static int tree(Survey *v, uint32_t root) {
    int leaves;
    if (leaf_depth(v, root, &leaves)) return -1;
    uint8_t type = v->levels[0][root == 1 ? 100 : 0]; /* the root's: a table or an index b-tree */
    uint8_t family = type == 0x05 || type == 0x0D ? 0x05 : 0x02;
    return walk(v, root, 0, leaves, family);
}

/* The free list (checkList): trunk pages, their leaves, as many as the header says. */
static int free_list(Survey *v) {
    Pages *p = v->p;
    uint32_t trunk = p->free_first;
    uint64_t count = 0;
    if (!v->levels[0] && !(v->levels[0] = malloc(p->page_size))) return wrong(v, trunk, NULL);
    unsigned char *buf = v->levels[0];
    while (trunk) {
        if (use(v, trunk)) return -1;
        if (pages_read(p, trunk, buf)) return wrong(v, trunk, "a page number past the end of the file");
        uint32_t n = be32(buf + 4);
        if (n > p->usable / 4 - 2) return wrong(v, trunk, "a free-list page listing more pages than it holds");
        for (uint32_t i = 0; i < n; i++)
            if (use(v, be32(buf + 8 + 4 * i))) return -1;
        count += 1 + (uint64_t)n;
        trunk = be32(buf);
    }
    return count == p->free_count ? 0 : wrong(v, p->free_first, "a free list of another length than its header says");
}

/* No b-tree page outside the b-trees and the free list ("never used"). Pages left unmarked are
 * overflow pages, which begin with the next page's number: below 2^25 pages its first byte is
 * 0 or 1, never a b-tree type. Pointer-map pages (auto-vacuum files) would look like one. */
static int orphans(Survey *v) {
    Pages *p = v->p;
    if (p->autovacuum || p->pages >= 1u << 25) return 0;
    for (uint32_t pgno = 2; pgno <= p->pages; pgno++) {
        unsigned char b;
        if (marked(v->marks, pgno)) continue;
        if (pread(p->fd, &b, 1, (off_t)(pgno - 1) * p->page_size) != 1)
            return wrong(v, pgno, "a page number past the end of the file");
        if (b == 0x02 || b == 0x05 || b == 0x0A || b == 0x0D) return wrong(v, pgno, "a b-tree page that no b-tree refers to");
    }
    return 0;
}

static int survey_run(Survey *v, const uint32_t *roots, Py_ssize_t n, uint64_t *leaves) {
    uint32_t lock = LOCK_BYTE / v->p->page_size + 1;
    if (lock <= v->p->pages) v->marks[lock / 8] |= (uint8_t)(1u << (lock % 8));
    if (tree(v, v->root = 1)) return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        v->leaves = 0;
        if (tree(v, v->root = roots[i])) return -1;
        leaves[i] = v->leaves;
    }
    v->root = 0;
    return free_list(v) || orphans(v) ? -1 : 0;
}

/* The roots as page numbers; NULL with an exception set. */
static uint32_t *parse_roots(PyObject *arg, Py_ssize_t *n) {
    if (!PyTuple_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "roots must be a tuple of page numbers");
        return NULL;
    }
    *n = PyTuple_GET_SIZE(arg);
    uint32_t *roots = malloc((size_t)(*n + 1) * sizeof(uint32_t));
    if (!roots) return (uint32_t *)PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < *n; i++) {
        PyObject *item = PyTuple_GET_ITEM(arg, i);
        long long r = PyLong_Check(item) ? PyLong_AsLongLong(item) : -1;
        if (r < 2 || r > UINT32_MAX) {
            free(roots);
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a root page out of range (page 1 is always surveyed)");
            return NULL;
        }
        roots[i] = (uint32_t)r;
    }
    return roots;
}

/* Take another Pages' survey of the same file (``known``, as survey returned it). */
static PyObject *adopt(Pages *self, PyObject *known, size_t bytes) {
    if (!PyBytes_Check(known) || (size_t)PyBytes_GET_SIZE(known) != bytes) {
        PyErr_SetString(PyExc_ValueError, "known is not a survey of a file of this size");
        return NULL;
    }
    if (!(self->marks = malloc(bytes))) return PyErr_NoMemory();
    memcpy(self->marks, PyBytes_AS_STRING(known), bytes);
    return Py_BuildValue("(O())", known);
}

PyObject *Pages_survey(Pages *self, PyObject *args, PyObject *kwds) {
    static char *keywords[] = {"roots", "known", NULL};
    PyObject *roots_arg, *known = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|$O", keywords, &roots_arg, &known)) return NULL;
    if (self->fd < 0 || self->busy) {
        PyErr_SetString(native_unreadable, self->fd < 0 ? "the page reader is closed" : "the page reader is busy");
        return NULL;
    }
    size_t bytes = self->pages / 8 + 1;
    free(self->marks);
    self->marks = NULL;
    if (known != Py_None) return adopt(self, known, bytes);
    Py_ssize_t n;
    uint32_t *roots = parse_roots(roots_arg, &n);
    if (!roots) return NULL;
    Survey v = {.p = self, .marks = calloc(bytes, 1), .scratch = malloc(page_scratch_entries(self->page_size) * 4)};
    uint64_t *leaves = calloc((size_t)n + 1, sizeof(uint64_t));
    int status = -1;
    if (v.marks && v.scratch && leaves) {
        self->busy = 1;
        Py_BEGIN_ALLOW_THREADS
        status = survey_run(&v, roots, n, leaves);
        Py_END_ALLOW_THREADS
        self->busy = 0;
    }
    for (int d = 0; d < MAX_DEPTH; d++) free(v.levels[d]);
    free(v.scratch);
    free(roots);
    PyObject *out = NULL;
    if (status == 0) {
        PyObject *counts = PyTuple_New(n);
        for (Py_ssize_t i = 0; counts && i < n; i++)
            PyTuple_SET_ITEM(counts, i, PyLong_FromUnsignedLongLong(leaves[i]));
        out = counts ? Py_BuildValue("(y#N)", (const char *)v.marks, (Py_ssize_t)bytes, counts) : NULL;
        self->marks = v.marks;
        free(leaves);
    } else {
        free(v.marks);
        PyObject *what = v.why && v.marks && v.scratch && leaves ? PyUnicode_FromFormat("page %u: %s", (unsigned)v.at, v.why) : NULL;
        if (what) /* args: (what, the root of the b-tree it is in, or 0) */
            PyErr_SetObject(native_damaged, Py_BuildValue("(NI)", what, (unsigned)v.root));
        else
            PyErr_NoMemory();
        free(leaves);
    }
    return out;
}
