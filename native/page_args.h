/* The page reader's checked arguments (page_args.c). */
#ifndef NVBRIDGE_PAGE_ARGS_H
#define NVBRIDGE_PAGE_ARGS_H

#include "pages.h"

/* A column in a set of integers: (position, values, nulls pass); field -1: no filter. */
typedef struct {
    int field, nulls, n;
    int64_t *values; /* malloc'd: the caller frees it */
} MemberArg;

/* A column within [lo, hi): (position, lo or None, hi or None, nulls pass); field -1: none. */
typedef struct {
    int field, nulls, has_lo, has_hi;
    int64_t lo, hi;
} BoundArg;

/* Sorted, disjoint, inclusive rowid spans; n -1: every rowid. */
typedef struct {
    Py_ssize_t n;
    int64_t *lo, *hi;
    int64_t *buf; /* malloc'd: the caller frees it */
} SpansArg;

/* Each: 0, or -1 with TypeError (a wrong shape or type), ValueError or MemoryError set. */
int arg_ints(PyObject *o, const char *what, int64_t **out, int *n);
int arg_positions(PyObject *o, int **out, int *n);
int arg_member(PyObject *o, MemberArg *m);
int arg_bound(PyObject *o, BoundArg *b);
int arg_spans(PyObject *o, SpansArg *s);

#endif
