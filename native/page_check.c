/* SQLite's own checks of one b-tree page, made on every page the page reader uses.
 *
 * Why all of them: where a check is missing, a damaged page reads as a plausible one (an empty
 * leaf below the root drops its rows; a cell pointer moved into a freed cell reads a deleted
 * row). Each check here is one SQLite makes, on reads (btree.c: decodeFlags, btreeInitPage,
 * getAndInitPage) or in PRAGMA integrity_check (btreeComputeFreeSpace, checkTreePage's cell
 * ranges and its coverage of the page by cells, free blocks and counted fragments), so a page
 * passes here only if SQLite would call it sound. The one addition: no cell may start inside
 * the cell pointer array (SQLite never writes one there; its checks count on the content area's
 * start instead, which a damaged header can move).
 */
#include "pages.h"

#include <stdlib.h>

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

size_t page_scratch_entries(uint32_t page_size) { return (page_size - 8) / 6 + page_size / 4 + 2; }

/* Bytes of the cell at ``at`` on its page (SQLite's xCellSize for the page's type); 0 where its
 * header runs past the usable end or its payload size passes 32 bits (SQLite keeps 32). */
static uint32_t cell_bytes(const unsigned char *page, uint32_t at, uint32_t usable, uint8_t type) {
    const unsigned char *c = page + at, *end = page + usable;
    uint64_t size, key;
    if (type == 0x05) {
        int b = at + 4 < usable ? varint(c + 4, end, &key) : 0;
        return b ? 4 + (uint32_t)b : 0;
    }
    uint32_t child = type == 0x02 ? 4 : 0;
    int a = at + child < usable ? varint(c + child, end, &size) : 0, b = 0;
    if (!a || size > UINT32_MAX) return 0;
    if (type == 0x0D && !(b = varint(c + a, end, &key))) return 0;
    uint64_t local = local_size(size, usable, type != 0x0D);
    uint64_t n = child + (uint64_t)a + (uint64_t)b + local + (local < size ? 4 : 0);
    if (n < 4) n = 4; /* SQLite's minimum cell size */
    return n > usable ? 0 : (uint32_t)n;
}

/* btreeComputeFreeSpace: the free-block chain in order, inside the page, and the free bytes it
 * and the header count no more than the page holds. */
static const char *free_space(const unsigned char *page, uint32_t head, uint32_t first_cell, uint32_t top,
                              uint32_t usable) {
    uint32_t pc = be16(page + head + 1), last = usable - 4;
    uint64_t nfree = (uint64_t)page[head + 7] + top;
    if (pc) {
        uint32_t next, size;
        if (pc < top) return "a free block before the cell content area";
        for (;;) {
            if (pc > last) return "a free block past the end of its page";
            next = be16(page + pc);
            size = be16(page + pc + 2);
            nfree += size;
            if (next <= pc + size + 3) break;
            pc = next;
        }
        if (next > 0) return "free blocks out of order";
        if (pc + size > usable) return "a free block past the end of its page";
    }
    if (nfree > usable || nfree < first_cell) return "free space the page cannot hold";
    return NULL;
}

/* checkTreePage's coverage: cells and free blocks (both sorted by offset) never share a byte, and
 * the bytes between them are the fragments the header counts. */
static const char *coverage(const unsigned char *page, uint32_t head, uint32_t top, uint32_t usable,
                            const uint32_t *cells, uint32_t n) {
    uint32_t prev = top - 1, frag = 0, fb = be16(page + head + 1), i = 0;
    while (i < n || fb) {
        uint32_t start, end;
        if (fb && (i == n || fb < cells[i] >> 16)) {
            start = fb;
            end = fb + be16(page + fb + 2) - 1;
            fb = be16(page + fb);
        } else {
            start = cells[i] >> 16;
            end = cells[i] & 0xFFFF;
            i++;
        }
        if ((prev & 0xFFFF) >= start) return "two cells or free blocks share bytes";
        frag += start - (prev & 0xFFFF) - 1;
        prev = end;
    }
    frag += usable - (prev & 0xFFFF) - 1;
    return frag == page[head + 7] ? NULL : "free bytes its header does not count";
}

const char *page_check(const unsigned char *page, uint32_t pgno, uint32_t page_size, uint32_t usable, int is_root,
                       PageHead *out, uint32_t *scratch) {
    uint32_t head = pgno == 1 ? 100 : 0;
    uint8_t type = page[head];
    if (type != 0x02 && type != 0x05 && type != 0x0A && type != 0x0D) return "a page that is no b-tree page";
    int leaf = type >= 0x0A;
    uint32_t ncells = be16(page + head + 3), cells = head + (leaf ? 8 : 12);
    if (ncells > (page_size - 8) / 6) return "more cells than a page holds";
    /* getAndInitPage: a page below the root has cells; moveToRoot: so has an interior root, but
     * page 1's (it then holds only its right child) */
    if (ncells < 1 && !(is_root && (leaf || pgno == 1)))
        return is_root ? "an interior root page without cells" : "an empty page below the root";
    uint32_t top = be16(page + head + 5) ? be16(page + head + 5) : 65536, first_cell = cells + 2 * ncells;
    const char *why = free_space(page, head, first_cell, top, usable);
    if (why) return why;
    if (top < first_cell) return "a cell content area over the cell pointers";
    int sorted = 1;
    for (uint32_t k = 0; k < ncells; k++) { /* the last pointer first: cells are written downwards */
        uint32_t at = be16(page + cells + 2 * (ncells - 1 - k));
        if (at < top || at > usable - 4) return "a cell pointer outside the cell content area";
        uint32_t size = cell_bytes(page, at, usable, type);
        if (!size || at + size > usable) return "a cell past the end of its page";
        scratch[k] = at << 16 | (at + size - 1);
        if (k && scratch[k] < scratch[k - 1]) sorted = 0;
    }
    if (!sorted) qsort(scratch, ncells, sizeof(uint32_t), cmp_u32);
    if ((why = coverage(page, head, top, usable, scratch, ncells))) return why;
    out->head = head;
    out->type = type;
    out->ncells = ncells;
    out->cells = cells;
    return NULL;
}
