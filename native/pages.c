/* Rows of an SQLite table read from the file's b-tree pages into Arrow-layout columns, without
 * SQLite's virtual machine.
 *
 * Why by hand: through SQLite, a conversion's reads spend most of their time stepping the
 * virtual machine and fetching each field through the value API (0.9 s of a 2M NVTX-row
 * conversion's 4.2 s of CPU); the rows themselves are a few varints per field. No library reads
 * SQLite pages for us (ConnectorX, DuckDB's scanner and ADBC all step SQLite), so this file
 * walks the table b-tree itself, for exactly the queries the readers make: a rowid table's
 * columns by record position, in rowid order, rows kept by rowid spans, one integer column in a
 * set and one integer column within bounds (each optionally letting NULL through).
 *
 * It reads only what it can be sure of. The caller checks the schema (a rowid table, no index,
 * no generated column, no REAL affinity, NULL defaults: readers/_pages.py); here a file that is
 * not UTF-8 or not in rollback-journal mode, a page that is not a table b-tree page, keys out of
 * order, a cell past its page, or a filter value that is not an integer raises Unreadable, and
 * the caller reads the query through SQLite, which reads it or names the damage. Types are as
 * strict as sqlite_read.c's. The file is opened read-only and only ever read.
 */
#include "columns.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BLOCK_PAGES 64 /* leaf pages read per pread: tables are mostly written page after page */
#define MAX_DEPTH 40   /* a b-tree deeper than this is damaged (SQLite's own limit is 20) */
#define MAX_POSITION 32766 /* SQLite's column limit is 32767 */

typedef struct {
    PyObject_HEAD
    int fd;
    int busy; /* a scan runs (the GIL released): close() and __init__() refuse */
    uint32_t page_size, usable, pages;
    uint32_t changes; /* the header's change counter when the file was opened */
    unsigned char *block;  /* BLOCK_PAGES pages from block_first, block_count of them read */
    uint32_t block_first, block_count;
} Pages;

/* chunk_spans' figures per rowid chunk of ``size`` from ``first``: rows with a start, least and
 * greatest start, rows without one, greatest ``latest`` (where the gate column is in ``gates``). */
typedef struct {
    int64_t first, size, n;
    int64_t *count, *lo, *hi, *nulls, *latest;
    int start, latest_at, gate_at, ngates;
    const int64_t *gates;
    int untyped; /* a start or latest that is not an integer: no figures */
} Chunks;

/* One scan: the query, its output, and where it is. */
typedef struct {
    Pages *p;
    /* rows kept: rowid in a span (NULL: every rowid), then the two filters */
    const int64_t *span_lo, *span_hi;
    Py_ssize_t nspans, span_at;
    const int *field; /* per output column: record position, -1 the rowid */
    int alias;        /* position stored NULL and read as the rowid (INTEGER PRIMARY KEY), -1 */
    int member_field, member_nulls, nmembers;
    const int64_t *members;
    int bound_field, bound_nulls, has_lo, has_hi;
    int64_t lo, hi;
    int npos; /* record positions to decode: the greatest used + 1 */
    uint64_t *serial;
    uint32_t *offset;
    Column *cols;
    int ncols;
    int64_t n;
    size_t cap;
    int64_t last_rowid;
    int any_row, done;
    unsigned char *payload; /* a payload assembled from its overflow pages */
    size_t payload_cap;
    unsigned char *levels[MAX_DEPTH]; /* a copy of the interior page at each depth */
    unsigned char *overflow;          /* one overflow page */
    const char *error;                /* why the scan stopped; NULL: out of memory */
    int bad_column;
    int64_t limit;   /* scan_window: rows still to read before stopping; -1 otherwise */
    int64_t next;    /* scan_window: the rowid it stopped at, if has_next */
    int has_next;
    Chunks *chunks;  /* chunk_spans: the figures the kept rows go to; NULL otherwise */
    int leaf_depth;  /* the depth leaves were found at (MAX_DEPTH until then) */
} Scan;

enum { SCAN_OK = 0, SCAN_FAIL = -1 };

static inline uint32_t be16(const unsigned char *p) { return (uint32_t)p[0] << 8 | p[1]; }
static inline uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int fail(Scan *s, const char *why) {
    s->error = why;
    return SCAN_FAIL;
}

/* An SQLite varint at ``p`` (not past ``end``): its length, 0 if it runs past ``end``. */
static inline int varint(const unsigned char *p, const unsigned char *end, uint64_t *out) {
    if (p < end && !(*p & 0x80)) { /* nearly every header field: one byte */
        *out = *p;
        return 1;
    }
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) {
        if (p + i >= end) return 0;
        v = (v << 7) | (p[i] & 0x7F);
        if (!(p[i] & 0x80)) {
            *out = v;
            return i + 1;
        }
    }
    if (p + 8 >= end) return 0;
    *out = (v << 8) | p[8];
    return 9;
}

/* Read page ``pgno`` whole into ``buf``. */
static int read_page(Scan *s, uint32_t pgno, unsigned char *buf) {
    Pages *p = s->p;
    if (pgno < 1 || pgno > p->pages) return fail(s, "a page number past the end of the file");
    ssize_t got = pread(p->fd, buf, p->page_size, (off_t)(pgno - 1) * p->page_size);
    if (got != (ssize_t)p->page_size) return fail(s, "a page could not be read");
    return SCAN_OK;
}

/* Leaf page ``pgno`` from the block cache (the pointer lasts until the next leaf_page call). */
static const unsigned char *leaf_page(Scan *s, uint32_t pgno) {
    Pages *p = s->p;
    if (pgno < 1 || pgno > p->pages) {
        fail(s, "a page number past the end of the file");
        return NULL;
    }
    if (!(p->block_count && pgno >= p->block_first && pgno < p->block_first + p->block_count)) {
        uint32_t count = p->pages - pgno + 1 < BLOCK_PAGES ? p->pages - pgno + 1 : BLOCK_PAGES;
        ssize_t got = pread(p->fd, p->block, (size_t)count * p->page_size, (off_t)(pgno - 1) * p->page_size);
        if (got < (ssize_t)p->page_size) {
            p->block_count = 0;
            fail(s, "a page could not be read");
            return NULL;
        }
        p->block_first = pgno;
        p->block_count = (uint32_t)(got / p->page_size);
    }
    return p->block + (size_t)(pgno - p->block_first) * p->page_size;
}

/* -1 if the file changed since it was opened (its header's change counter), or its header cannot
 * be read: the geometry and the cached block would no longer hold. */
static int unchanged(Pages *p) {
    unsigned char h[4];
    return pread(p->fd, h, 4, 24) == 4 && be32(h) == p->changes ? 0 : -1;
}

/* -- spans ------------------------------------------------------------------------------------ */

/* Does any span meet the rowids (lo, hi]? (Keys under an interior cell.) */
static int spans_meet(const Scan *s, int64_t lo_excl, int has_lo, int64_t hi_incl, int has_hi) {
    if (!s->span_lo) return 1;
    /* the first span ending after lo_excl */
    Py_ssize_t a = 0, b = s->nspans;
    if (has_lo) {
        while (a < b) {
            Py_ssize_t m = a + (b - a) / 2;
            if (s->span_hi[m] <= lo_excl) a = m + 1;
            else b = m;
        }
    }
    if (a == s->nspans) return 0;
    return !has_hi || s->span_lo[a] <= hi_incl;
}

/* -- one row ---------------------------------------------------------------------------------- */

/* A big-endian two's-complement integer of serial type 1-6 (1, 2, 3, 4, 6 or 8 bytes). */
static inline int64_t int_value(const unsigned char *v, uint64_t serial) {
    switch (serial) {
    case 1:
        return (int8_t)v[0];
    case 2:
        return (int16_t)(v[0] << 8 | v[1]);
    case 3:
        return (int32_t)((uint32_t)v[0] << 24 | (uint32_t)v[1] << 16 | (uint32_t)v[2] << 8) >> 8;
    case 4:
        return (int32_t)be32(v);
    case 5:
        return (int64_t)((uint64_t)(int16_t)(v[0] << 8 | v[1]) << 32 | be32(v + 2));
    default:
        return (int64_t)((uint64_t)be32(v) << 32 | be32(v + 4));
    }
}

static inline uint64_t serial_size(uint64_t serial) {
    static const uint8_t width[] = {0, 1, 2, 3, 4, 6, 8, 8, 0, 0};
    if (serial < 10) return width[serial];
    return (serial - 12) / 2; /* 12+: blob (even) or text (odd); 10 and 11 refused before */
}

enum { V_NULL, V_INT, V_OTHER };

static inline int member(const int64_t *values, int n, int64_t v) {
    for (int i = 0; i < n; i++)
        if (values[i] == v) return 1;
    return 0;
}

/* Record position ``pos`` as an integer: V_NULL, V_INT (in *out) or V_OTHER. */
static inline int int_field(const Scan *s, const unsigned char *rec, int pos, int64_t rowid, int64_t *out) {
    if (pos == s->alias) { /* an INTEGER PRIMARY KEY reads as the rowid, whatever is stored */
        *out = rowid;
        return V_INT;
    }
    uint64_t t = s->serial[pos];
    if (t == 0) return V_NULL;
    if (t >= 1 && t <= 6) {
        *out = int_value(rec + s->offset[pos], t);
        return V_INT;
    }
    if (t == 8 || t == 9) {
        *out = (int64_t)(t - 8);
        return V_INT;
    }
    return V_OTHER;
}

/* Decode the header of record ``rec`` of ``size`` bytes, then apply the filters: 1 keep the row,
 * 0 skip it, SCAN_FAIL. */
static int keep_row(Scan *s, const unsigned char *rec, uint64_t size, int64_t rowid) {
    uint64_t header;
    int k = varint(rec, rec + size, &header);
    if (!k || header > size || header < (uint64_t)k) return fail(s, "a record header past its record");
    const unsigned char *h = rec + k, *hend = rec + header;
    uint64_t body = header;
    for (int pos = 0; pos < s->npos; pos++) {
        if (h >= hend) { /* a short record (a column added later): NULL, its default here */
            s->serial[pos] = 0;
            continue;
        }
        uint64_t t;
        int len = varint(h, hend, &t);
        if (!len || t == 10 || t == 11) return fail(s, "a record header that is not SQLite's");
        h += len;
        uint64_t width = serial_size(t);
        if (body + width > size) return fail(s, "a value past its record");
        s->serial[pos] = t;
        s->offset[pos] = (uint32_t)body;
        body += width;
    }
    int64_t v;
    if (s->member_field >= 0) {
        int kind = int_field(s, rec, s->member_field, rowid, &v);
        if (kind == V_OTHER) return fail(s, "a filtered column holds a value that is not an integer");
        if (kind == V_NULL) {
            if (!s->member_nulls) return 0;
        } else if (!member(s->members, s->nmembers, v)) {
            return 0;
        }
    }
    if (s->bound_field >= 0) {
        int kind = int_field(s, rec, s->bound_field, rowid, &v);
        if (kind == V_OTHER) return fail(s, "a filtered column holds a value that is not an integer");
        if (kind == V_NULL) {
            if (!s->bound_nulls) return 0;
        } else if ((s->has_lo && v < s->lo) || (s->has_hi && v >= s->hi)) {
            return 0;
        }
    }
    return 1;
}

/* The output columns of a kept record. */
static int store_row(Scan *s, const unsigned char *rec, int64_t rowid) {
    if ((size_t)s->n == s->cap) {
        s->cap *= 2;
        if (columns_grow(s->cols, s->ncols, s->cap)) return fail(s, NULL);
    }
    int64_t n = s->n;
    for (int c = 0; c < s->ncols; c++) {
        Column *col = &s->cols[c];
        int pos = s->field[c];
        uint64_t t = pos < 0 || pos == s->alias ? 1 : s->serial[pos];
        if (t == 0) {
            if (column_null(col, n, s->cap)) return fail(s, NULL);
            continue;
        }
        int err = 0;
        switch (col->kind) {
        case 'i':
        case 'f': {
            int64_t x;
            if (pos < 0) {
                x = rowid;
            } else if (int_field(s, rec, pos, rowid, &x) != V_INT) {
                if (col->kind == 'i' || t != 7) goto bad_type;
                uint64_t bits = (uint64_t)int_value(rec + s->offset[pos], 6);
                if ((bits & 0x7FF0000000000000ULL) == 0x7FF0000000000000ULL && (bits & 0xFFFFFFFFFFFFFULL)) {
                    if (column_null(col, n, s->cap)) return fail(s, NULL); /* NaN: SQLite reads NULL */
                    continue;
                }
                memcpy(col->vals + n * 8, &bits, 8);
                break;
            }
            if (col->kind == 'i') {
                ((int64_t *)col->vals)[n] = x;
            } else {
                ((double *)col->vals)[n] = (double)x;
            }
            break;
        }
        case 's':
        case 'b':
            if (pos < 0 || t < 12 || (t & 1) != (col->kind == 's')) goto bad_type;
            if (col->kind == 's' && !native_utf8_valid(rec + s->offset[pos], serial_size(t))) goto bad_type;
            err = column_bytes(col, n, rec + s->offset[pos], serial_size(t));
            break;
        }
        if (err == -2) return fail(s, "text past 2 GB in one read");
        if (err) return fail(s, NULL);
        column_valid(col, n);
        continue;
    bad_type:
        s->bad_column = c;
        return fail(s, "a value of another type than its column's");
    }
    s->n++;
    return SCAN_OK;
}

/* A kept record's part in its rowid chunk's figures (chunk_spans). */
static int chunk_row(Scan *s, const unsigned char *rec, int64_t rowid) {
    Chunks *c = s->chunks;
    if (rowid < c->first) return SCAN_OK;
    uint64_t at = ((uint64_t)rowid - (uint64_t)c->first) / (uint64_t)c->size;
    int64_t v;
    if (at >= (uint64_t)c->n) return SCAN_OK;
    int kind = int_field(s, rec, c->start, rowid, &v);
    if (kind == V_OTHER) return c->untyped = 1, s->done = 1, SCAN_OK;
    if (kind == V_NULL) {
        c->nulls[at]++;
    } else {
        c->count[at]++;
        if (v < c->lo[at]) c->lo[at] = v;
        if (v > c->hi[at]) c->hi[at] = v;
    }
    if (c->latest_at < 0) return SCAN_OK;
    if (c->gate_at >= 0) {
        int64_t g;
        int gate = int_field(s, rec, c->gate_at, rowid, &g);
        if (gate == V_OTHER) return fail(s, "a filtered column holds a value that is not an integer");
        if (gate == V_NULL || !member(c->gates, c->ngates, g)) return SCAN_OK;
    }
    kind = int_field(s, rec, c->latest_at, rowid, &v);
    if (kind == V_OTHER) return c->untyped = 1, s->done = 1, SCAN_OK;
    if (kind == V_INT && v > c->latest[at]) c->latest[at] = v;
    return SCAN_OK;
}

/* -- the b-tree ------------------------------------------------------------------------------- */

/* The payload of the cell at ``cell`` (its size, rowid read already): local part and overflow
 * pages, in one piece. ``local_end``: the end of the page's usable area. */
static const unsigned char *payload(Scan *s, const unsigned char *cell, const unsigned char *local_end,
                                    uint64_t size) {
    uint32_t u = s->p->usable;
    uint64_t x = u - 35, local = size;
    if (size > x) { /* SQLite's split between the page and its overflow chain */
        uint64_t m = ((uint64_t)(u - 12) * 32 / 255) - 23;
        uint64_t k = m + ((size - m) % (u - 4));
        local = k <= x ? k : m;
    }
    if (cell + local + (local < size ? 4 : 0) > local_end) {
        fail(s, "a cell past its page");
        return NULL;
    }
    if (local == size) return cell;
    uint64_t chain = (size - local + u - 5) / (u - 4); /* overflow pages the payload needs */
    if (chain > s->p->pages) {
        fail(s, "an overflow chain longer than the file");
        return NULL;
    }
    /* Pages of the chain seen so far, hashed: a chain that comes back to a page is damaged. */
    size_t slots = 16;
    while (slots < 2 * chain) slots *= 2;
    uint32_t *seen = calloc(slots, sizeof(uint32_t));
    if (!seen || native_reserve((char **)&s->payload, &s->payload_cap, (size_t)size, 1 << 16)) {
        free(seen);
        fail(s, "a record too large to read");
        return NULL;
    }
    memcpy(s->payload, cell, (size_t)local);
    uint64_t have = local;
    uint32_t next = be32(cell + local);
    const char *why = NULL;
    while (have < size && !why) {
        size_t at = native_mix64(next) & (slots - 1);
        while (seen[at] && seen[at] != next) at = (at + 1) & (slots - 1);
        if (seen[at]) {
            why = "an overflow chain that loops";
            break;
        }
        seen[at] = next;
        if (!next || read_page(s, next, s->overflow)) {
            why = "an overflow chain shorter than its payload";
            break;
        }
        uint64_t take = size - have < u - 4 ? size - have : u - 4;
        memcpy(s->payload + have, s->overflow + 4, (size_t)take);
        have += take;
        next = be32(s->overflow);
    }
    free(seen);
    if (why) {
        fail(s, why);
        return NULL;
    }
    return s->payload;
}

static int visit(Scan *s, uint32_t pgno, int depth, int64_t lo_excl, int has_lo, int64_t hi_incl,
                 int has_hi);

/* Cell ``i`` of a leaf's ``ncells``: its payload size and rowid (lengths in *a, *b); 0, or
 * SCAN_FAIL. A cell lies between the cell pointers and the usable end, as SQLite checks. */
static int cell_head(Scan *s, const unsigned char *page, uint32_t head, uint32_t ncells, uint32_t i,
                     const unsigned char **cell, uint64_t *size, uint64_t *key, int *a, int *b) {
    uint32_t at = be16(page + head + 8 + 2 * i), u = s->p->usable;
    if (at < head + 8 + 2 * ncells || at > u - 4) return fail(s, "a cell past its page");
    *cell = page + at;
    *a = varint(*cell, page + u, size);
    *b = *a ? varint(*cell + *a, page + u, key) : 0;
    return *a && *b ? SCAN_OK : fail(s, "a cell past its page");
}

/* A leaf's rows, its keys within its parent's (lo_excl, hi_incl]. */
static int visit_leaf(Scan *s, const unsigned char *page, uint32_t pgno, int64_t lo_excl, int has_lo,
                      int64_t hi_incl, int has_hi) {
    uint32_t head = pgno == 1 ? 100 : 0, u = s->p->usable;
    uint32_t ncells = be16(page + head + 3);
    const unsigned char *ptrs = page + head + 8, *end = page + u, *cell;
    uint64_t size, key;
    int a, b;
    if (ptrs + 2 * (size_t)ncells > end) return fail(s, "a cell pointer array past its page");
    for (uint32_t i = 0; i < ncells; i++) {
        if (cell_head(s, page, head, ncells, i, &cell, &size, &key, &a, &b)) return SCAN_FAIL;
        int64_t rowid = (int64_t)key;
        if (s->any_row && rowid <= s->last_rowid) return fail(s, "rowids out of order");
        if ((has_lo && rowid <= lo_excl) || (has_hi && rowid > hi_incl)) return fail(s, "a key outside its parent's range");
        s->any_row = 1;
        s->last_rowid = rowid;
        if (s->span_lo) {
            while (s->span_at < s->nspans && rowid > s->span_hi[s->span_at]) s->span_at++;
            if (s->span_at == s->nspans) {
                s->done = 1;
                return SCAN_OK;
            }
            if (rowid < s->span_lo[s->span_at]) continue;
        }
        if (s->limit >= 0 && s->limit-- == 0) { /* scan_window: the row after the window */
            s->next = rowid;
            s->has_next = s->done = 1;
            return SCAN_OK;
        }
        if (size > (uint64_t)INT32_MAX) return fail(s, "a record past 2 GB");
        const unsigned char *rec = payload(s, cell + a + b, end, size);
        int keep = rec ? keep_row(s, rec, size, rowid) : SCAN_FAIL;
        if (keep == SCAN_FAIL) return SCAN_FAIL;
        if (keep && (s->chunks ? chunk_row(s, rec, rowid) : store_row(s, rec, rowid))) return SCAN_FAIL;
        if (s->done) return SCAN_OK;
    }
    return SCAN_OK;
}

static int visit_interior(Scan *s, uint32_t pgno, int depth, int64_t lo_excl, int has_lo, int64_t hi_incl,
                          int has_hi) {
    unsigned char *page = s->levels[depth];
    uint32_t head = pgno == 1 ? 100 : 0, u = s->p->usable;
    uint32_t ncells = be16(page + head + 3);
    const unsigned char *ptrs = page + head + 12, *end = page + u;
    if (!ncells) return fail(s, "an interior page without cells");
    if (ptrs + 2 * (size_t)ncells > end) return fail(s, "a cell pointer array past its page");
    int64_t prev = lo_excl;
    int has_prev = has_lo;
    for (uint32_t i = 0; i <= ncells && !s->done; i++) {
        uint32_t child;
        int64_t key = hi_incl;
        int has_key = has_hi;
        if (i < ncells) {
            uint32_t at = be16(ptrs + 2 * i);
            if (at < head + 12 + 2 * ncells || at > u - 5) return fail(s, "a cell past its page");
            uint64_t k;
            if (!varint(page + at + 4, end, &k)) return fail(s, "a cell past its page");
            child = be32(page + at);
            key = (int64_t)k;
            has_key = 1;
            if ((has_prev && key <= prev) || (has_hi && key > hi_incl)) return fail(s, "keys out of order");
        } else {
            child = be32(page + head + 8); /* the right-most child */
        }
        if (spans_meet(s, prev, has_prev, key, has_key) && visit(s, child, depth + 1, prev, has_prev, key, has_key))
            return SCAN_FAIL;
        prev = key;
        has_prev = has_key;
    }
    return SCAN_OK;
}

static int visit(Scan *s, uint32_t pgno, int depth, int64_t lo_excl, int has_lo, int64_t hi_incl, int has_hi) {
    if (depth >= MAX_DEPTH) return fail(s, "a b-tree deeper than SQLite's");
    uint32_t head = pgno == 1 ? 100 : 0;
    if (!s->levels[depth] && !(s->levels[depth] = malloc(s->p->page_size))) return fail(s, NULL);
    const unsigned char *page;
    if (depth < s->leaf_depth) { /* above the leaves (all at one depth): one page, not a block */
        if (read_page(s, pgno, s->levels[depth])) return SCAN_FAIL;
        page = s->levels[depth];
    } else if (!(page = leaf_page(s, pgno))) {
        return SCAN_FAIL;
    }
    if (page[head] == 0x0D) {
        s->leaf_depth = depth;
        return visit_leaf(s, page, pgno, lo_excl, has_lo, hi_incl, has_hi);
    }
    if (page[head] != 0x05) return fail(s, "a page that is not a table b-tree page");
    /* the block cache moves on under the children: the page is kept at its depth */
    if (page != s->levels[depth]) memcpy(s->levels[depth], page, s->p->page_size);
    return visit_interior(s, pgno, depth, lo_excl, has_lo, hi_incl, has_hi);
}

/* -- Python ----------------------------------------------------------------------------------- */

/* A sequence of integers into a malloc'd array. */
static int parse_ints(PyObject *values, int64_t **out, int *count) {
    PyObject *seq = PySequence_Fast(values, "filter values must be a sequence");
    if (!seq) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (!(*out = malloc((size_t)(n ? n : 1) * sizeof(int64_t)))) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n && !PyErr_Occurred(); i++)
        (*out)[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
    Py_DECREF(seq);
    *count = (int)n;
    return PyErr_Occurred() || n > INT_MAX ? -1 : 0;
}

/* A (position, values, nulls pass) filter, or None. */
static int parse_member(PyObject *arg, Scan *s, int64_t **members) {
    s->member_field = -1;
    if (arg == Py_None) return 0;
    PyObject *values;
    if (!PyArg_ParseTuple(arg, "iOp", &s->member_field, &values, &s->member_nulls)) return -1;
    if (parse_ints(values, members, &s->nmembers)) return -1;
    s->members = *members;
    return 0;
}

/* A (position, lo or None, hi or None, nulls pass) filter, or None. */
static int parse_bound(PyObject *arg, Scan *s) {
    s->bound_field = -1;
    if (arg == Py_None) return 0;
    PyObject *lo, *hi;
    if (!PyArg_ParseTuple(arg, "iOOp", &s->bound_field, &lo, &hi, &s->bound_nulls)) return -1;
    s->has_lo = lo != Py_None;
    s->has_hi = hi != Py_None;
    if (s->has_lo) s->lo = PyLong_AsLongLong(lo);
    if (s->has_hi && !PyErr_Occurred()) s->hi = PyLong_AsLongLong(hi);
    if (!s->has_lo && !s->has_hi) s->bound_field = -1; /* no bound: every row, as SQL's (1) */
    return PyErr_Occurred() ? -1 : 0;
}

/* Spans as sorted, disjoint inclusive (lo, hi) pairs: checked here, the scan relies on it. */
static int parse_spans(PyObject *arg, Scan *s, int64_t **buf) {
    if (arg == Py_None) return 0;
    PyObject *seq = PySequence_Fast(arg, "spans must be a sequence");
    if (!seq) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    *buf = malloc((size_t)(2 * n + 2) * sizeof(int64_t));
    if (!*buf) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    int64_t *lo = *buf, *hi = *buf + n + 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        long long a, b;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "LL", &a, &b)) {
            Py_DECREF(seq);
            return -1;
        }
        if (a > b || (i && a <= hi[i - 1])) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_ValueError, "spans must be sorted, disjoint and non-empty");
            return -1;
        }
        lo[i] = a;
        hi[i] = b;
    }
    Py_DECREF(seq);
    s->span_lo = lo;
    s->span_hi = hi;
    s->nspans = n;
    return 0;
}

/* A scan of ``self`` from page ``root`` with the spans and member filter already parsed: check the
 * positions, allocate the per-row buffers. 0, or -1 with an exception set. */
/* Widen s->npos to record position ``pos``; -1 (ValueError set) if it is not one. */
static int position(Scan *s, long pos) {
    if (pos < -1 || pos > MAX_POSITION) {
        PyErr_SetString(PyExc_ValueError, "a record position out of range");
        return -1;
    }
    if (pos + 1 > s->npos) s->npos = (int)pos + 1;
    return 0;
}

static int scan_ready(Scan *s, Pages *self, long long root) {
    s->p = self;
    s->leaf_depth = MAX_DEPTH;
    if (self->fd < 0 || self->busy) {
        PyErr_SetString(native_unreadable, self->fd < 0 ? "the page reader is closed" : "the page reader is busy");
        return -1;
    }
    if (position(s, s->member_field) || position(s, s->bound_field) || position(s, s->alias)) return -1;
    if (root < 1 || root > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "a root page out of range");
        return -1;
    }
    s->serial = malloc((size_t)(s->npos + 1) * sizeof(uint64_t));
    s->offset = malloc((size_t)(s->npos + 1) * sizeof(uint32_t));
    s->overflow = malloc(self->page_size);
    if (!s->serial || !s->offset || !s->overflow) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* Walk the b-tree from ``root``, the GIL released; 0, or -1 with Unreadable or MemoryError set. */
static int scan_run(Scan *s, long long root) {
    int status;
    s->p->busy = 1; /* close() and __init__() refuse meanwhile: the scan uses the file and block */
    Py_BEGIN_ALLOW_THREADS
    status = unchanged(s->p) ? fail(s, "the file changed since it was opened") : SCAN_OK;
    if (status == SCAN_OK)
        status = s->cols && columns_grow(s->cols, s->ncols, s->cap) ? fail(s, NULL) : visit(s, (uint32_t)root, 0, 0, 0, 0, 0);
    Py_END_ALLOW_THREADS
    s->p->busy = 0;
    if (status == SCAN_OK) return 0;
    if (!s->error)
        PyErr_NoMemory();
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
}

static PyObject *Pages_scan(Pages *self, PyObject *args) {
    long long root;
    PyObject *positions, *spans, *member, *bound;
    const char *kinds;
    long long first = 0, count = -1;
    Scan s = {.limit = -1, .cap = 1 << 16};
    if (!PyArg_ParseTuple(args, "LOsOiOO|LL", &root, &positions, &kinds, &spans, &s.alias, &member, &bound, &first,
                          &count))
        return NULL;
    int64_t window_lo = first, window_hi = INT64_MAX;
    int window = count >= 0;
    s.ncols = (int)strlen(kinds);
    int64_t *span_buf = NULL, *members = NULL;
    int *field = NULL;
    PyObject *out = NULL;
    PyObject *seq = PySequence_Fast(positions, "positions must be a sequence");
    if (!seq) return NULL;
    if (PySequence_Fast_GET_SIZE(seq) != s.ncols) {
        PyErr_SetString(PyExc_ValueError, "one position per column kind");
        goto done;
    }
    if (!(field = malloc((size_t)(s.ncols ? s.ncols : 1) * sizeof(int)))) {
        PyErr_NoMemory();
        goto done;
    }
    for (int c = 0; c < s.ncols; c++) {
        long pos = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, c));
        if ((pos == -1 && PyErr_Occurred()) || position(&s, pos)) goto done;
        field[c] = (int)pos;
    }
    s.field = field;
    if (window) { /* rows from ``first`` on, ``count`` of them: spans are not taken */
        if (spans != Py_None) {
            PyErr_SetString(PyExc_ValueError, "a window takes no spans");
            goto done;
        }
        s.span_lo = &window_lo;
        s.span_hi = &window_hi;
        s.nspans = 1;
        s.limit = count;
    }
    if (PyErr_Occurred() || parse_spans(spans, &s, &span_buf) || parse_member(member, &s, &members) ||
        parse_bound(bound, &s) || !(s.cols = columns_new(kinds, s.ncols)) || scan_ready(&s, self, root) ||
        scan_run(&s, root))
        goto done;
    out = columns_list(s.cols, s.ncols, s.n);
    if (out && window) {
        PyObject *next = s.has_next ? PyLong_FromLongLong(s.next) : Py_NewRef(Py_None);
        PyObject *pair = next ? PyTuple_Pack(2, out, next) : NULL;
        Py_XDECREF(next);
        Py_SETREF(out, pair);
    }
done:
    Py_DECREF(seq);
    scan_free(&s);
    free(span_buf);
    free(members);
    free(field);
    return out;
}

static PyObject *Pages_chunk_spans(Pages *self, PyObject *args) {
    long long root;
    long long first, last, size;
    Py_ssize_t n;
    int start, latest_at, gate_at, alias;
    PyObject *gate, *member;
    if (!PyArg_ParseTuple(args, "LLLLniiiOiO", &root, &first, &last, &size, &n, &start, &latest_at, &gate_at, &gate,
                          &alias, &member))
        return NULL;
    if (size <= 0 || n < 0 || n > (PY_SSIZE_T_MAX / 8 - 1) / 5 || start < 0) {
        PyErr_SetString(PyExc_ValueError, "chunk size, count and start position out of range");
        return NULL;
    }
    Chunks c = {.first = first, .size = size, .n = n, .start = start, .latest_at = latest_at, .gate_at = gate_at};
    Scan s = {.limit = -1, .alias = alias, .bound_field = -1, .chunks = &c};
    int64_t lo = first, hi = last, *members = NULL, *gates = NULL;
    s.span_lo = &lo;
    s.span_hi = &hi;
    s.nspans = 1;
    if (position(&s, start) || position(&s, latest_at) || position(&s, gate_at)) return NULL;
    int64_t *buf = malloc((size_t)(5 * n + 1) * sizeof(int64_t));
    PyObject *out = NULL;
    if (!buf) return PyErr_NoMemory();
    c.count = buf, c.lo = buf + n, c.hi = buf + 2 * n, c.nulls = buf + 3 * n, c.latest = buf + 4 * n;
    for (Py_ssize_t i = 0; i < n; i++) {
        c.count[i] = c.nulls[i] = 0;
        c.lo[i] = INT64_MAX;
        c.hi[i] = c.latest[i] = INT64_MIN;
    }
    if (c.gate_at >= 0) {
        if (parse_ints(gate, &gates, &c.ngates)) goto done;
        c.gates = gates;
    }
    if (parse_member(member, &s, &members) || scan_ready(&s, self, root) || scan_run(&s, root)) goto done;
    if (c.untyped) {
        Py_INCREF(Py_None);
        out = Py_None;
    } else {
        out = native_buffer(buf, (Py_ssize_t)(5 * n * sizeof(int64_t)));
        buf = NULL;
    }
done:
    scan_free(&s);
    free(buf);
    free(members);
    free(gates);
    return out;
}

/* Forget the file: its descriptor, its geometry and the block cache. */
static void forget(Pages *self) {
    if (self->fd >= 0) close(self->fd);
    self->fd = -1;
    free(self->block);
    self->block = NULL;
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
    if (!why && memcmp(h, "SQLite format 3", 16)) why = "not an SQLite file";
    uint32_t page_size = be16(h + 16) == 1 ? 65536 : be16(h + 16);
    if (!why && (page_size < 512 || (page_size & (page_size - 1)))) why = "a page size SQLite does not write";
    if (!why && (h[18] != 1 || h[19] != 1)) why = "a file in WAL mode (its pages may be in the -wal file)";
    if (!why && be32(h + 56) != 1) why = "text that is not UTF-8";
    if (!why && page_size - h[20] < 480) why = "a reserved area SQLite does not write";
    if (!why && (h[21] != 64 || h[22] != 32 || h[23] != 32)) why = "payload fractions SQLite does not write";
    /* The header's page count holds if the last writer was a current SQLite (it then matches the
     * change counter); past the file's end, the file is cut short. */
    uint64_t in_file = why ? 0 : (uint64_t)st.st_size / page_size, pages = be32(h + 28);
    int counted = pages && be32(h + 92) == be32(h + 24);
    if (!why && counted && pages > in_file) why = "a file shorter than its header says";
    if (why) {
        if (fd >= 0) close(fd);
        PyErr_Format(native_unreadable, "%s", why);
        return -1;
    }
    if (!counted) pages = in_file;
    self->block = malloc((size_t)BLOCK_PAGES * page_size);
    if (!self->block) {
        close(fd);
        PyErr_NoMemory();
        return -1;
    }
    self->fd = fd;
    self->page_size = page_size;
    self->usable = page_size - h[20];
    self->pages = pages > UINT32_MAX ? UINT32_MAX : (uint32_t)pages;
    self->changes = be32(h + 24);
    return 0;
}

static PyObject *Pages_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    Pages *self = (Pages *)type->tp_alloc(type, 0);
    if (self) self->fd = -1;
    return (PyObject *)self;
}

static void Pages_dealloc(Pages *self) {
    forget(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Pages_methods[] = {
    {"scan", (PyCFunction)Pages_scan, METH_VARARGS,
     "scan(root, positions, kinds, spans, alias, member, bound[, first, count]) -> [(rows, nulls, validity, values[, data]), ...]\n\n"
     "The rows of the table b-tree at page ``root``, in rowid order: per output column its record "
     "position (-1: the rowid) and kind (as Reader.read). ``spans``: sorted disjoint inclusive rowid "
     "(lo, hi) pairs, or None for all; ``alias``: the INTEGER PRIMARY KEY's position (-1 none); "
     "``member``: (position, values, nulls pass) or None; ``bound``: (position, lo or None, hi or None, "
     "nulls pass) for lo <= value < hi, or None. With ``first`` and ``count`` (spans None): a window, "
     "the rows from rowid ``first`` on until ``count`` rows (kept or not) were passed, returned as "
     "(columns, the rowid of the next row or None). Raises Unreadable on anything it cannot be sure of."},
    {"chunk_spans", (PyCFunction)Pages_chunk_spans, METH_VARARGS,
     "chunk_spans(root, first, last, size, n, start, latest, gate, gates, alias, member) -> int64 buffer [5][n] or None\n\n"
     "Reader.chunk_spans over rowids first..last of the rows ``member`` keeps (as scan's): ``start``, "
     "``latest`` and ``gate`` are record positions (-1: none); latest counts only where the gate "
     "column is in ``gates``. None where a start or latest is not an integer."},
    {"close", (PyCFunction)Pages_close, METH_NOARGS, "Close the file."},
    {NULL}};

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
    if (PyType_Ready(&PagesType) < 0) return -1;
    return PyModule_AddObjectRef(module, "Pages", (PyObject *)&PagesType);
}
