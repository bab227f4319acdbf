/* Arrow-layout column buffers filled a value at a time, shared by the two readers of SQLite files
 * (sqlite_read.c through SQLite, pages.c from the file's pages). Filled without the GIL. */
#ifndef NVBRIDGE_COLUMNS_H
#define NVBRIDGE_COLUMNS_H

#include "native.h"

#include <stdint.h>
#include <string.h>

typedef struct {
    char kind;         /* 'i' int64, 'f' float64, 's' UTF-8 text, 'b' blob */
    int64_t nulls;
    uint8_t *valid;    /* Arrow validity bitmap, allocated at the first null */
    char *vals;        /* int64/double values, or int32 offsets (n + 1) for 's' and 'b' */
    char *data;        /* text and blob bytes */
    size_t data_len, data_cap;
} Column;

/* ``kinds``' columns without rows; NULL (ValueError or MemoryError set) on failure. */
Column *columns_new(const char *kinds, int ncols);
/* Room for ``rows`` rows in every column; -1 when out of memory. */
int columns_grow(Column *cols, int ncols, size_t rows);
void columns_free(Column *cols, int ncols);
/* The columns' first ``n`` rows as a list of (rows, nulls, validity or None, values[, data]),
 * their buffers handed over (the columns still need columns_free). */
PyObject *columns_list(Column *cols, int ncols, int64_t n);

/* Row ``row`` of ``col`` is null; ``cap`` rows are allocated. -1 when out of memory. */
static inline int column_null(Column *col, int64_t row, size_t cap) {
    if (!col->valid) {
        col->valid = malloc(cap / 8 + 1);
        if (!col->valid) return -1;
        memset(col->valid, 0xFF, (size_t)(row / 8) + 1);
    }
    col->valid[row / 8] &= (uint8_t)~(1u << (row % 8));
    col->nulls++;
    if (col->kind == 's' || col->kind == 'b')
        ((int32_t *)col->vals)[row + 1] = (int32_t)col->data_len;
    else
        ((int64_t *)col->vals)[row] = 0;
    return 0;
}

static inline void column_valid(Column *col, int64_t row) {
    if (col->valid) col->valid[row / 8] |= (uint8_t)(1u << (row % 8));
}

/* Text or blob bytes as row ``row``'s value: 0, -1 out of memory, -2 past int32 offsets. */
static inline int column_bytes(Column *col, int64_t row, const void *p, size_t len) {
    if (col->data_len + len > INT32_MAX) return -2;
    if (native_reserve(&col->data, &col->data_cap, col->data_len + len, 1 << 16)) return -1;
    if (len) memcpy(col->data + col->data_len, p, len);
    col->data_len += len;
    ((int32_t *)col->vals)[row + 1] = (int32_t)col->data_len;
    return 0;
}

#endif
