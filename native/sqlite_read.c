/* SQLite rows straight into Arrow-layout column buffers, the GIL released while rows are read.
 *
 * Why by hand: ConnectorX, the fastest reader on PyPI, starts three threads per query that never
 * end (a streamed conversion makes thousands of queries: 7,500 idle threads and 100+ MB at 50M
 * NVTX rows), and converts every value through Rust's generic row API. This loop keeps one
 * connection per reader thread and writes each value once.
 *
 * Types are strict, as ConnectorX's are: an integer column holding text, a real or a blob, or a
 * text column holding anything but valid UTF-8 text, raises Unreadable; the caller then reads
 * the query the slow way, which names the damage or reads it leniently.
 */
#include "columns.h"

#include <sqlite3.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    PyObject_HEAD
    sqlite3 *db;
} Reader;

PyObject *native_unreadable; /* nvbridge._native.Unreadable: the readers cannot read a query */

/* -- the read --------------------------------------------------------------------------------- */

enum { READ_OK, READ_SQLITE, READ_TYPE, READ_MEMORY, READ_TOO_BIG };

/* Step ``stmt`` to the end into ``cols``; no Python calls (the GIL is released). */
static int read_rows(sqlite3_stmt *stmt, Column *cols, int ncols, int64_t *rows_out, size_t cap,
                     int *bad_column) {
    int64_t n = 0;
    int rc;
    if (columns_grow(cols, ncols, cap)) return READ_MEMORY;
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
        if ((size_t)n == cap) {
            cap *= 2;
            if (columns_grow(cols, ncols, cap)) return READ_MEMORY;
        }
        for (int c = 0; c < ncols; c++) {
            Column *col = &cols[c];
            /* One value handle per field: sqlite3_column_* would look the column up per call. */
            sqlite3_value *value = sqlite3_column_value(stmt, c);
            int type = sqlite3_value_type(value), err = 0;
            if (type == SQLITE_NULL) {
                if (column_null(col, n, cap)) return READ_MEMORY;
                continue;
            }
            switch (col->kind) {
            case 'i':
                if (type != SQLITE_INTEGER) goto bad_type;
                ((int64_t *)col->vals)[n] = sqlite3_value_int64(value);
                break;
            case 'f':
                if (type != SQLITE_FLOAT && type != SQLITE_INTEGER) goto bad_type;
                ((double *)col->vals)[n] = sqlite3_value_double(value);
                break;
            case 's': {
                if (type != SQLITE_TEXT) goto bad_type;
                const unsigned char *text = sqlite3_value_text(value);
                size_t len = (size_t)sqlite3_value_bytes(value);
                if (!text && len) return READ_MEMORY;
                if (!native_utf8_valid(text, len)) goto bad_type;
                err = column_bytes(col, n, text, len);
                break;
            }
            case 'b': {
                if (type != SQLITE_BLOB) goto bad_type;
                const void *blob = sqlite3_value_blob(value);
                err = column_bytes(col, n, blob, (size_t)sqlite3_value_bytes(value));
                break;
            }
            }
            if (err) return err == -2 ? READ_TOO_BIG : READ_MEMORY;
            column_valid(col, n);
            continue;
        bad_type:
            *bad_column = c;
            return READ_TYPE;
        }
        n++;
    }
    *rows_out = n;
    return rc == SQLITE_DONE ? READ_OK : READ_SQLITE;
}

static PyObject *Reader_read(Reader *self, PyObject *args) {
    const char *sql, *kinds;
    Py_ssize_t capacity = 1 << 16;
    if (!PyArg_ParseTuple(args, "ss|n", &sql, &kinds, &capacity)) return NULL;
    if (!self->db) {
        PyErr_SetString(native_unreadable, "the reader is closed");
        return NULL;
    }
    int ncols = (int)strlen(kinds);
    Column *cols = columns_new(kinds, ncols);
    if (!cols) return NULL;
    sqlite3_stmt *stmt = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = sqlite3_prepare_v2(self->db, sql, -1, &stmt, NULL);
    Py_END_ALLOW_THREADS
    if (rc != SQLITE_OK) {
        PyErr_Format(native_unreadable, "%s", sqlite3_errmsg(self->db));
        sqlite3_finalize(stmt);
        columns_free(cols, ncols);
        return NULL;
    }
    int columns = sqlite3_column_count(stmt);
    if (columns != ncols) {
        PyErr_Format(PyExc_ValueError, "the query has %d columns, %d kinds given", columns, ncols);
        sqlite3_finalize(stmt);
        columns_free(cols, ncols);
        return NULL;
    }
    int64_t n = 0;
    int bad = -1, status;
    size_t cap = capacity > 0 ? (size_t)capacity : 1;
    Py_BEGIN_ALLOW_THREADS
    status = read_rows(stmt, cols, ncols, &n, cap, &bad);
    Py_END_ALLOW_THREADS
    PyObject *out = NULL;
    switch (status) {
    case READ_OK:
        out = columns_list(cols, ncols, n);
        break;
    case READ_SQLITE:
        PyErr_Format(native_unreadable, "%s", sqlite3_errmsg(self->db));
        break;
    case READ_TYPE:
        PyErr_Format(native_unreadable, "column %s holds a value of another type",
                     sqlite3_column_name(stmt, bad));
        break;
    case READ_TOO_BIG:
        PyErr_SetString(native_unreadable, "text past 2 GB in one read");
        break;
    default:
        PyErr_NoMemory();
    }
    sqlite3_finalize(stmt);
    columns_free(cols, ncols);
    return out;
}

/* Per rowid chunk: rows with a start, min and max start, rows without one, max ``latest``. */
typedef struct {
    int64_t *count, *lo, *hi, *nulls, *latest;
} Spans;

static PyObject *Reader_chunk_spans(Reader *self, PyObject *args) {
    const char *sql;
    long long first, size;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "sLLn", &sql, &first, &size, &n)) return NULL;
    if (!self->db) {
        PyErr_SetString(native_unreadable, "the reader is closed");
        return NULL;
    }
    if (size <= 0 || n < 0) {
        PyErr_SetString(PyExc_ValueError, "chunk size and count must be positive");
        return NULL;
    }
    int64_t *buf = malloc((size_t)(5 * n + 1) * sizeof(int64_t));
    if (!buf) return PyErr_NoMemory();
    Spans s = {buf, buf + n, buf + 2 * n, buf + 3 * n, buf + 4 * n};
    for (Py_ssize_t i = 0; i < n; i++) {
        s.count[i] = s.nulls[i] = 0;
        s.lo[i] = INT64_MAX;
        s.hi[i] = s.latest[i] = INT64_MIN;
    }
    sqlite3_stmt *stmt = NULL;
    int rc, typed = 1;
    Py_BEGIN_ALLOW_THREADS
    rc = sqlite3_prepare_v2(self->db, sql, -1, &stmt, NULL);
    if (rc == SQLITE_OK && sqlite3_column_count(stmt) != 3) rc = SQLITE_MISUSE;
    while (rc == SQLITE_OK && (rc = sqlite3_step(stmt)) == SQLITE_ROW) {
        int64_t chunk = (sqlite3_column_int64(stmt, 0) - first) / size;
        if (chunk < 0 || chunk >= n) continue;
        sqlite3_value *start = sqlite3_column_value(stmt, 1), *latest = sqlite3_column_value(stmt, 2);
        int st = sqlite3_value_type(start), lt = sqlite3_value_type(latest);
        if ((st != SQLITE_INTEGER && st != SQLITE_NULL) || (lt != SQLITE_INTEGER && lt != SQLITE_NULL)) {
            typed = 0;
            break;
        }
        if (st == SQLITE_NULL) {
            s.nulls[chunk]++;
        } else {
            int64_t v = sqlite3_value_int64(start);
            s.count[chunk]++;
            if (v < s.lo[chunk]) s.lo[chunk] = v;
            if (v > s.hi[chunk]) s.hi[chunk] = v;
        }
        if (lt != SQLITE_NULL) {
            int64_t v = sqlite3_value_int64(latest);
            if (v > s.latest[chunk]) s.latest[chunk] = v;
        }
        rc = SQLITE_OK;
    }
    Py_END_ALLOW_THREADS
    if (rc != SQLITE_DONE && rc != SQLITE_OK && typed) {
        PyErr_Format(native_unreadable, "%s", sqlite3_errmsg(self->db));
        sqlite3_finalize(stmt);
        free(buf);
        return NULL;
    }
    sqlite3_finalize(stmt);
    if (!typed) {
        free(buf);
        Py_RETURN_NONE;
    }
    return native_buffer(buf, (Py_ssize_t)(5 * n * sizeof(int64_t)));
}

static PyObject *Reader_close(Reader *self, PyObject *Py_UNUSED(ignored)) {
    if (self->db) {
        sqlite3_close_v2(self->db);
        self->db = NULL;
    }
    Py_RETURN_NONE;
}

static int Reader_init(Reader *self, PyObject *args, PyObject *kwds) {
    static char *keywords[] = {"uri", "mmap_bytes", NULL};
    const char *uri;
    long long mmap_bytes = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "s|L", keywords, &uri, &mmap_bytes)) return -1;
    if (self->db) {
        sqlite3_close_v2(self->db);
        self->db = NULL;
    }
    int rc;
    /* One connection per reader thread, used by that thread only: no SQLite mutexes. */
    Py_BEGIN_ALLOW_THREADS
    rc = sqlite3_open_v2(uri, &self->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, NULL);
    Py_END_ALLOW_THREADS
    if (rc != SQLITE_OK) {
        PyErr_Format(native_unreadable, "%s", self->db ? sqlite3_errmsg(self->db) : "cannot open");
        sqlite3_close_v2(self->db);
        self->db = NULL;
        return -1;
    }
    if (mmap_bytes > 0) {
        char pragma[64];
        snprintf(pragma, sizeof pragma, "PRAGMA mmap_size=%lld", mmap_bytes);
        sqlite3_exec(self->db, pragma, NULL, NULL, NULL);
    }
    return 0;
}

static void Reader_dealloc(Reader *self) {
    if (self->db) sqlite3_close_v2(self->db);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Reader_methods[] = {
    {"read", (PyCFunction)Reader_read, METH_VARARGS,
     "read(sql, kinds, capacity=65536) -> [(rows, nulls, validity, values[, data]), ...]\n\n"
     "Every row of ``sql``; ``kinds`` names each result column's type: i int64, f float64, "
     "s UTF-8 text, b blob. Raises Unreadable on an SQLite error or a value of another type."},
    {"chunk_spans", (PyCFunction)Reader_chunk_spans, METH_VARARGS,
     "chunk_spans(sql, first, size, n) -> int64 buffer [5][n] or None\n\n"
     "``sql`` selects (rowid, start, latest) rows; per chunk of ``size`` rowids from ``first``: "
     "rows with a start, the least and greatest start (INT64_MAX/MIN if none), rows without one, "
     "the greatest latest (INT64_MIN if none). None where a start or latest is not an integer."},
    {"close", (PyCFunction)Reader_close, METH_NOARGS, "Close the connection."},
    {NULL, NULL, 0, NULL}};

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nvbridge._native.Reader",
    .tp_basicsize = sizeof(Reader),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Reader(uri, mmap_bytes=0): a read-only SQLite connection for one thread.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Reader_init,
    .tp_dealloc = (destructor)Reader_dealloc,
    .tp_methods = Reader_methods,
};

int native_add_reader(PyObject *module) {
    native_unreadable = PyErr_NewException("nvbridge._native.Unreadable", NULL, NULL);
    if (!native_unreadable || PyModule_AddObjectRef(module, "Unreadable", native_unreadable) < 0) return -1;
    if (PyType_Ready(&ReaderType) < 0) return -1;
    return PyModule_AddObjectRef(module, "Reader", (PyObject *)&ReaderType);
}
