/* One walk of a table b-tree (pages.c), as the Python methods (pages_py.c) set it up. */
#ifndef NVBRIDGE_SCAN_H
#define NVBRIDGE_SCAN_H

#include "page_args.h"

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
    uint32_t root;
    /* rows kept: rowid in a span (NULL: every rowid), then the two filters */
    const int64_t *span_lo, *span_hi;
    Py_ssize_t nspans, span_at;
    const int *field; /* per output column: record position, -1 the rowid */
    int alias;        /* position stored NULL and read as the rowid (INTEGER PRIMARY KEY), -1 */
    MemberArg member;
    BoundArg bound;
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
    uint32_t *scratch;                /* page_check's */
    const char *error;                /* why the scan stopped; NULL: out of memory */
    int damaged;                      /* error is damage SQLite's checks would find */
    uint32_t bad_page;                /* the page it found damaged */
    int bad_column;
    int64_t limit;   /* scan_window: rows still to read before stopping; -1 otherwise */
    int64_t next;    /* scan_window: the rowid it stopped at, if has_next */
    int has_next;
    Chunks *chunks;  /* chunk_spans: the figures the kept rows go to; NULL otherwise */
    int leaf_depth;  /* the depth leaves were found at (MAX_DEPTH until then) */
    /* the rows inside the spans it passed (kept or not), for the caller's cross-check */
    int64_t passed, seen_lo, seen_hi;
} Scan;

enum { SCAN_OK = 0, SCAN_FAIL = -1 };

/* Walk the b-tree from ``root`` (no GIL needed): SCAN_OK, or SCAN_FAIL with error/damaged set. */
int scan_walk(Scan *s, uint32_t root);

#endif
