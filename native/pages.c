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
 * The file is input nobody vouches for. Every page it uses passes SQLite's own checks first
 * (page_check.c; the survey, survey.c, checked where each page sits), every record SQLite's
 * OP_Column checks, every overflow chain accessPayload's and integrity_check's; what fails one
 * is damage (Damaged, naming the page), which the caller reports and never hands to SQLite: on
 * a damaged page SQLite may read some other subset of the rows without an error. What it only
 * does not do (a value of another type than its column's, text that is not UTF-8, a filter on
 * a column holding a non-integer, a record past SQLite's length limit) raises Unreadable, and
 * SQLite reads the query. The caller checks the schema (readers/_pages.py); the file is opened
 * read-only and only ever read.
 */
#include "scan.h"

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

static int fail(Scan *s, const char *why) {
    s->error = why;
    return SCAN_FAIL;
}

static int damage(Scan *s, uint32_t pgno, const char *why) {
    s->error = why;
    s->damaged = 1;
    s->bad_page = pgno;
    return SCAN_FAIL;
}

int pages_read(const Pages *p, uint32_t pgno, unsigned char *buf) {
    if (pgno < 1 || pgno > p->pages) return -1;
    ssize_t got = pread(p->fd, buf, p->page_size, (off_t)(pgno - 1) * p->page_size);
    return got == (ssize_t)p->page_size ? 0 : -1;
}

/* Leaf page ``pgno`` from the block cache (the pointer lasts until the next leaf_page call). */
static const unsigned char *leaf_page(Scan *s, uint32_t pgno) {
    Pages *p = s->p;
    if (pgno < 1 || pgno > p->pages) {
        damage(s, pgno, "a page number past the end of the file");
        return NULL;
    }
    if (!(p->block_count && pgno >= p->block_first && pgno < p->block_first + p->block_count)) {
        uint32_t count = p->pages - pgno + 1 < BLOCK_PAGES ? p->pages - pgno + 1 : BLOCK_PAGES;
        ssize_t got = pread(p->fd, p->block, (size_t)count * p->page_size, (off_t)(pgno - 1) * p->page_size);
        if (got < (ssize_t)p->page_size) {
            p->block_count = 0;
            damage(s, pgno, "a page past the end of the file");
            return NULL;
        }
        p->block_first = pgno;
        p->block_count = (uint32_t)(got / p->page_size);
    }
    return p->block + (size_t)(pgno - p->block_first) * p->page_size;
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

/* The header of record ``rec`` (``size`` bytes, on page ``pgno``), checked whole as OP_Column
 * checks it: header size within the record and SQLite's limit, every serial type inside the
 * header, values filling the record exactly. The first npos types and offsets kept. */
static int parse_record(Scan *s, const unsigned char *rec, uint64_t size, uint32_t pgno) {
    uint64_t header;
    int k = varint(rec, rec + size, &header), pos = 0;
    if (!k) return damage(s, pgno, "an empty record, or one whose header size runs past it");
    if (header > MAX_HEADER || header > size) return damage(s, pgno, "a record header longer than its record");
    /* SQLite reads a header of size 0, or of its size alone, as every column NULL, but never
     * writes one (a table has a column): a type-less header over a payload is damage */
    if (header <= (uint64_t)k) return damage(s, pgno, "a record header without column types");
    const unsigned char *h = rec + k, *hend = rec + header;
    uint64_t body = header;
    {
        while (h < hend) {
            uint64_t t;
            int len = varint(h, hend, &t);
            if (!len) return damage(s, pgno, "a record header whose last type runs past it");
            if (t == 10 || t == 11) return damage(s, pgno, "a record header holding a type SQLite reserves");
            h += len;
            uint64_t width = serial_size(t);
            if (body + width > size) return damage(s, pgno, "record values past the end of their record");
            if (pos < s->npos) {
                s->serial[pos] = t;
                s->offset[pos] = (uint32_t)body;
                pos++;
            }
            body += width;
        }
        if (body != size) return damage(s, pgno, "a record its values do not fill");
    }
    for (; pos < s->npos; pos++) s->serial[pos] = 0; /* a short record (a column added later): NULL */
    return SCAN_OK;
}

/* The filters on a parsed record: 1 keep the row, 0 skip it, SCAN_FAIL. */
static int keep_row(Scan *s, const unsigned char *rec, int64_t rowid) {
    int64_t v;
    if (s->member.field >= 0) {
        int kind = int_field(s, rec, s->member.field, rowid, &v);
        if (kind == V_OTHER) return fail(s, "a filtered column holds a value that is not an integer");
        if (kind == V_NULL) {
            if (!s->member.nulls) return 0;
        } else if (!member(s->member.values, s->member.n, v)) {
            return 0;
        }
    }
    if (s->bound.field >= 0) {
        int kind = int_field(s, rec, s->bound.field, rowid, &v);
        if (kind == V_OTHER) return fail(s, "a filtered column holds a value that is not an integer");
        if (kind == V_NULL) {
            if (!s->bound.nulls) return 0;
        } else if ((s->bound.has_lo && v < s->bound.lo) || (s->bound.has_hi && v >= s->bound.hi)) {
            return 0;
        }
    }
    return 1;
}

/* Column ``c`` of a kept record: 0, 1 a value of another type, or SCAN_FAIL. */
static int store_value(Scan *s, int c, const unsigned char *rec, int64_t rowid) {
    Column *col = &s->cols[c];
    int pos = s->field[c], err = 0;
    int64_t n = s->n;
    uint64_t t = pos < 0 || pos == s->alias ? 1 : s->serial[pos];
    if (t == 0) return column_null(col, n, s->cap) ? fail(s, NULL) : SCAN_OK;
    if (col->kind == 'i' || col->kind == 'f') {
        int64_t x;
        if (pos < 0) {
            x = rowid;
        } else if (int_field(s, rec, pos, rowid, &x) != V_INT) {
            if (col->kind == 'i' || t != 7) return 1;
            uint64_t bits = (uint64_t)int_value(rec + s->offset[pos], 6);
            if ((bits & 0x7FF0000000000000ULL) == 0x7FF0000000000000ULL && (bits & 0xFFFFFFFFFFFFFULL))
                return column_null(col, n, s->cap) ? fail(s, NULL) : SCAN_OK; /* NaN: SQLite reads NULL */
            memcpy(col->vals + n * 8, &bits, 8);
            column_valid(col, n);
            return SCAN_OK;
        }
        if (col->kind == 'i')
            ((int64_t *)col->vals)[n] = x;
        else
            ((double *)col->vals)[n] = (double)x;
    } else {
        if (pos < 0 || t < 12 || (t & 1) != (col->kind == 's')) return 1;
        if (col->kind == 's' && !native_utf8_valid(rec + s->offset[pos], serial_size(t))) return 1;
        err = column_bytes(col, n, rec + s->offset[pos], serial_size(t));
    }
    if (err == -2) return fail(s, "text past 2 GB in one read");
    if (err) return fail(s, NULL);
    column_valid(col, n);
    return SCAN_OK;
}

/* The output columns of a kept record. */
static int store_row(Scan *s, const unsigned char *rec, int64_t rowid) {
    if ((size_t)s->n == s->cap) {
        s->cap *= 2;
        if (columns_grow(s->cols, s->ncols, s->cap)) return fail(s, NULL);
    }
    for (int c = 0; c < s->ncols; c++) {
        int got = store_value(s, c, rec, rowid);
        if (got == SCAN_FAIL) return SCAN_FAIL;
        if (got) {
            s->bad_column = c;
            return fail(s, "a value of another type than its column's");
        }
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

/* The rest of a payload from its overflow chain into s->payload (``have`` bytes there already),
 * as accessPayload and integrity_check's checkList read it: ``chain`` pages, each in the file,
 * none a b-tree or free-list page (the survey's marks), none twice, the last one ending it. */
static int overflow_chain(Scan *s, uint32_t next, uint64_t have, uint64_t size, uint64_t chain, uint32_t pgno,
                          int64_t rowid) {
    uint32_t u = s->p->usable;
    const uint8_t *marks = s->p->marks;
    size_t slots = 16;
    while (slots < 2 * chain) slots *= 2;
    uint32_t *seen = calloc(slots, sizeof(uint32_t)); /* the chain's pages so far, hashed */
    if (!seen) return fail(s, NULL);
    const char *why = NULL;
    int claim = 0;
    for (uint64_t k = 0; k < chain && !why; k++) {
        size_t at = native_mix64(next) & (slots - 1);
        while (seen[at] && seen[at] != next) at = (at + 1) & (slots - 1);
        if (seen[at]) why = "an overflow chain that loops";
        else if (!next || pages_read(s->p, next, s->overflow)) why = "an overflow chain shorter than its payload";
        else if (marks && marked(marks, next)) why = "an overflow page that is a b-tree or free-list page";
        else if ((claim = owners_claim(s->p, next, s->root, rowid)) > 0) why = "an overflow page two records use";
        if (claim < 0) break;
        if (why) break;
        seen[at] = next;
        uint64_t take = size - have < u - 4 ? size - have : u - 4;
        memcpy(s->payload + have, s->overflow + 4, (size_t)take);
        have += take;
        next = be32(s->overflow);
    }
    free(seen);
    if (claim < 0) return fail(s, NULL);
    if (!why && next) why = "an overflow chain longer than its payload";
    return why ? damage(s, pgno, why) : SCAN_OK;
}

/* The payload of the cell at ``cell`` on page ``pgno`` (its size, rowid read already): local part
 * and overflow pages, in one piece. ``local_end``: the end of the page's usable area. */
static const unsigned char *payload(Scan *s, const unsigned char *cell, const unsigned char *local_end,
                                    uint64_t size, uint32_t pgno, int64_t rowid) {
    uint32_t u = s->p->usable;
    uint64_t local = local_size(size, u, 0);
    if (cell + local + (local < size ? 4 : 0) > local_end) {
        damage(s, pgno, "a cell past the end of its page");
        return NULL;
    }
    if (local == size) return cell;
    uint64_t chain = (size - local + u - 5) / (u - 4); /* overflow pages the payload needs */
    if (chain > s->p->pages) {
        damage(s, pgno, "an overflow chain longer than the file");
        return NULL;
    }
    if (native_reserve((char **)&s->payload, &s->payload_cap, (size_t)size, 1 << 16)) {
        fail(s, NULL);
        return NULL;
    }
    memcpy(s->payload, cell, (size_t)local);
    return overflow_chain(s, be32(cell + local), local, size, chain, pgno, rowid) ? NULL : s->payload;
}

/* Rowids a page's keys must lie in: (lo, hi], each end only where has_ says. */
typedef struct {
    int64_t lo, hi;
    int has_lo, has_hi;
} Range;

static int visit(Scan *s, uint32_t pgno, int depth, Range r);

/* Leaf cell ``i`` (page_check has bounded it): its rowid checked against the order and its
 * parent's range, then kept, passed or read. */
static int leaf_cell(Scan *s, const unsigned char *page, uint32_t pgno, const PageHead *h, uint32_t i, Range r) {
    const unsigned char *end = page + s->p->usable, *cell = page + be16(page + h->cells + 2 * i);
    uint64_t size, key;
    int a = varint(cell, end, &size), b = a ? varint(cell + a, end, &key) : 0;
    if (!a || !b) return damage(s, pgno, "a cell past the end of its page");
    int64_t rowid = (int64_t)key;
    if (s->any_row && rowid <= s->last_rowid) return damage(s, pgno, "rowids out of order");
    if ((r.has_lo && rowid <= r.lo) || (r.has_hi && rowid > r.hi)) return damage(s, pgno, "a rowid outside its parent's range");
    s->any_row = 1;
    s->last_rowid = rowid;
    if (s->span_lo) {
        while (s->span_at < s->nspans && rowid > s->span_hi[s->span_at]) s->span_at++;
        if (s->span_at == s->nspans) {
            s->done = 1;
            return SCAN_OK;
        }
        if (rowid < s->span_lo[s->span_at]) return SCAN_OK;
    }
    if (s->limit >= 0 && s->limit-- == 0) { /* scan_window: the row after the window */
        s->next = rowid;
        s->has_next = s->done = 1;
        return SCAN_OK;
    }
    if (!s->passed++) s->seen_lo = rowid;
    s->seen_hi = rowid;
    if (size > MAX_PAYLOAD) return fail(s, "a record longer than SQLite reads");
    const unsigned char *rec = payload(s, cell + a + b, end, size, pgno, rowid);
    if (!rec || parse_record(s, rec, size, pgno)) return SCAN_FAIL;
    int keep = keep_row(s, rec, rowid);
    if (keep == SCAN_FAIL) return SCAN_FAIL;
    return keep ? (s->chunks ? chunk_row(s, rec, rowid) : store_row(s, rec, rowid)) : SCAN_OK;
}

static int visit_interior(Scan *s, uint32_t pgno, int depth, const PageHead *h, Range r) {
    const unsigned char *page = s->levels[depth], *end = page + s->p->usable;
    Range child = {r.lo, r.hi, r.has_lo, r.has_hi};
    for (uint32_t i = 0; i <= h->ncells && !s->done; i++) {
        uint32_t pg;
        if (i < h->ncells) { /* page_check has bounded the cell: its key varint ends on the page */
            uint32_t at = be16(page + h->cells + 2 * i);
            uint64_t k;
            if (!varint(page + at + 4, end, &k)) return damage(s, pgno, "a cell past the end of its page");
            pg = be32(page + at);
            if ((child.has_lo && (int64_t)k <= child.lo) || (r.has_hi && (int64_t)k > r.hi))
                return damage(s, pgno, "keys out of order");
            child.hi = (int64_t)k;
            child.has_hi = 1;
        } else {
            pg = be32(page + h->head + 8); /* the right-most child */
            child.hi = r.hi;
            child.has_hi = r.has_hi;
        }
        if (spans_meet(s, child.lo, child.has_lo, child.hi, child.has_hi) && visit(s, pg, depth + 1, child))
            return SCAN_FAIL;
        child.lo = child.hi;
        child.has_lo = child.has_hi;
    }
    return SCAN_OK;
}

static int visit(Scan *s, uint32_t pgno, int depth, Range r) {
    if (depth >= MAX_DEPTH) return damage(s, pgno, "a b-tree deeper than SQLite reads");
    if (!s->levels[depth] && !(s->levels[depth] = malloc(s->p->page_size))) return fail(s, NULL);
    const unsigned char *page;
    if (depth < s->leaf_depth) { /* above the leaves (all at one depth): one page, not a block */
        if (pages_read(s->p, pgno, s->levels[depth])) return damage(s, pgno, "a page number past the end of the file");
        page = s->levels[depth];
    } else if (!(page = leaf_page(s, pgno))) {
        return SCAN_FAIL;
    }
    PageHead h;
    const char *why = page_check(page, pgno, s->p->page_size, s->p->usable, depth == 0, &h, s->scratch);
    if (why) return damage(s, pgno, why);
    if (h.type == 0x0D) {
        if (s->leaf_depth != MAX_DEPTH && depth != s->leaf_depth) return damage(s, pgno, "leaves at different depths");
        s->leaf_depth = depth;
        for (uint32_t i = 0; i < h.ncells && !s->done; i++)
            if (leaf_cell(s, page, pgno, &h, i, r)) return SCAN_FAIL;
        return SCAN_OK;
    }
    if (h.type != 0x05) return damage(s, pgno, "an index page in a table b-tree");
    if (depth >= s->leaf_depth) return damage(s, pgno, "leaves at different depths");
    /* the block cache moves on under the children: the page is kept at its depth */
    if (page != s->levels[depth]) memcpy(s->levels[depth], page, s->p->page_size);
    return visit_interior(s, pgno, depth, &h, r);
}

int scan_walk(Scan *s, uint32_t root) {
    Range all = {0, 0, 0, 0};
    s->root = root;
    return visit(s, root, 0, all);
}
