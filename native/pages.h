/* The page reader's parts: pages.c (the scans), page_check.c (SQLite's checks of one page),
 * survey.c (the file's b-trees and free list, page by page), page_args.c (typed arguments). */
#ifndef NVBRIDGE_PAGES_H
#define NVBRIDGE_PAGES_H

#include "columns.h"

#include <stdint.h>

#define BLOCK_PAGES 64 /* leaf pages read per pread: tables are mostly written page after page */
#define MAX_DEPTH 20   /* SQLite's BTCURSOR_MAX_DEPTH: its cursors refuse a page deeper than this */
#define MAX_POSITION 32766 /* SQLite's column limit is 32767 */
#define MAX_PAYLOAD 1000000000u /* SQLITE_MAX_LENGTH: SQLite refuses to read a longer record */
#define MAX_HEADER 98307u       /* OP_Column: a record header longer than this is corrupt */

typedef struct {
    PyObject_HEAD
    int fd;
    int busy; /* a scan runs (the GIL released): close() and __init__() refuse */
    uint32_t page_size, usable, pages;
    uint32_t changes;       /* the header's change counter when the file was opened */
    uint32_t free_first, free_count, autovacuum; /* header fields the survey checks */
    unsigned char *block;   /* BLOCK_PAGES pages from block_first, block_count of them read */
    uint32_t block_first, block_count;
    uint8_t *marks;         /* the survey's bit per page: a b-tree or free-list page (NULL: none yet) */
    struct Owner *owners;   /* overflow pages read so far, each with its record (owners_claim) */
    size_t owners_cap, owners_n;
} Pages;

/* An overflow page and the record whose chain holds it: the table's root and the rowid. */
typedef struct Owner {
    uint32_t page, root;
    int64_t rowid;
} Owner;

/* Overflow page ``page`` read for record (``root``, ``rowid``): 0 if no other record's chain held
 * it so far (then it is this one's), 1 if one did (a page used twice: integrity_check's "2nd
 * reference"), -1 out of memory. Kept for the life of the Pages, across its scans. */
int owners_claim(Pages *p, uint32_t page, uint32_t root, int64_t rowid);

/* nvbridge._native.Damaged: the page reader found a page SQLite's checks call corrupt. */
extern PyObject *native_damaged;

static inline uint32_t be16(const unsigned char *p) { return (uint32_t)p[0] << 8 | p[1]; }
static inline uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
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

/* The bytes of a ``size``-byte payload kept in its cell (SQLite's btreePayloadToLocal); the rest
 * is on overflow pages. ``index``: an index b-tree page (another maximum). */
static inline uint64_t local_size(uint64_t size, uint32_t usable, int index) {
    uint64_t max = index ? (uint64_t)(usable - 12) * 64 / 255 - 23 : (uint64_t)usable - 35;
    uint64_t min = (uint64_t)(usable - 12) * 32 / 255 - 23;
    if (size <= max) return size;
    uint64_t k = min + (size - min) % (usable - 4);
    return k <= max ? k : min;
}

static inline int marked(const uint8_t *marks, uint32_t pgno) { return marks[pgno / 8] >> (pgno % 8) & 1; }

/* A b-tree page's header, as page_check found it. */
typedef struct {
    uint32_t head;   /* where the page header starts: 100 on page 1, else 0 */
    uint8_t type;    /* 0x02 index interior, 0x05 table interior, 0x0A index leaf, 0x0D table leaf */
    uint32_t ncells;
    uint32_t cells;  /* where the cell pointer array starts */
} PageHead;

/* Entries page_check's ``scratch`` must hold for pages of ``page_size`` bytes. */
size_t page_scratch_entries(uint32_t page_size);

/* SQLite's checks of b-tree page ``page`` (btreeInitPage, btreeComputeFreeSpace, the cell and
 * coverage checks of checkTreePage, getAndInitPage's empty non-root page): NULL if it passes
 * them all (``out`` filled), else what is wrong with it. */
const char *page_check(const unsigned char *page, uint32_t pgno, uint32_t page_size, uint32_t usable, int is_root,
                       PageHead *out, uint32_t *scratch);

/* pread of page ``pgno`` whole into ``buf``: 0, or -1 (past the end, or short). */
int pages_read(const Pages *p, uint32_t pgno, unsigned char *buf);

/* Pages.survey's implementation (survey.c). */
PyObject *Pages_survey(Pages *self, PyObject *args, PyObject *kwds);

#endif
