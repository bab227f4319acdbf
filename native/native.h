/* nvbridge._native: the few loops NumPy and Arrow cannot express without a Python object or a
 * pass per row. Each source file adds its functions to the module. */
#ifndef NVBRIDGE_NATIVE_H
#define NVBRIDGE_NATIVE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

/* A Python object owning ``data`` (from malloc; freed with the object), exposing it through the
 * buffer protocol, so pyarrow and NumPy wrap it without a copy. */
PyObject *native_buffer(void *data, Py_ssize_t size);

/* Well-formed UTF-8 (no overlongs, no surrogates, nothing past U+10FFFF), as Arrow requires. */
int native_utf8_valid(const unsigned char *s, size_t n);

/* A 64-bit mixer for open-addressing hash tables of int64 keys (murmur3's finalizer). */
static inline uint64_t native_mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* Room for ``need`` bytes in the malloc'd ``*buf`` of ``*cap`` bytes, the capacity doubled from
 * ``first``; -1 when out of memory (the buffer left as it was). Inline: called per value. */
static inline int native_reserve(char **buf, size_t *cap, size_t need, size_t first) {
    if (need <= *cap) return 0;
    size_t grown = *cap ? *cap : first;
    while (grown < need) grown *= 2;
    char *p = realloc(*buf, grown);
    if (!p) return -1;
    *buf = p;
    *cap = grown;
    return 0;
}

/* nvbridge._native.Unreadable: a reader of SQLite files cannot read a query (sqlite_read.c). */
extern PyObject *native_unreadable;

int native_add_reader(PyObject *module);
int native_add_pages(PyObject *module);
int native_add_names(PyObject *module);
int native_add_tree(PyObject *module);
int native_add_rows(PyObject *module);
int native_add_store(PyObject *module);
int native_add_lines(PyObject *module);

#endif
