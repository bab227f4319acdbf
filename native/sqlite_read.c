/* SQLite rows straight into Arrow-layout column buffers, the GIL released while rows are read.
 *
 * Why by hand: ConnectorX, the fastest reader on PyPI, starts three threads per query that never
 * end (a streamed conversion makes thousands of queries: 7,500 idle threads and 100+ MB at 50M
 * NVTX rows), and converts every value through Rust's generic row API. This loop keeps one
 * connection per reader thread, reads memory-mapped pages and writes each value once.
 *
 * Types are strict, as ConnectorX's are: an integer column holding text, a real or a blob, or a
 * text column holding anything but valid UTF-8 text, raises Unreadable; the caller then reads
 * the query the slow way, which names the damage or reads it leniently.
 */
#include "native.h"

#include <sqlite3.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char kind;         /* 'i' int64, 'f' float64, 's' UTF-8 text, 'b' blob */
    int64_t nulls;
    uint8_t *valid;    /* Arrow validity bitmap, allocated at the first null */
    char *vals;        /* int64/double values, or int32 offsets (n + 1) for 's' and 'b' */
    char *data;        /* text and blob bytes */
    size_t data_len, data_cap;
} Column;

typedef struct {
    PyObject_HEAD
    sqlite3 *db;
} Reader;

static PyObject *Unreadable;

/* -- column buffers --------------------------------------------------------------------------- */

static size_t value_bytes(char kind, size_t rows) {
    return (kind == 's' || kind == 'b') ? (rows + 1) * sizeof(int32_t) : rows * sizeof(int64_t);
}

static int grow_rows(Column *cols, int ncols, size_t rows) {
    for (int c = 0; c < ncols; c++) {
        char *vals = realloc(cols[c].vals, value_bytes(cols[c].kind, rows));
        if (!vals) return -1;
        cols[c].vals = vals;
        if (cols[c].valid) {
            uint8_t *valid = realloc(cols[c].valid, rows / 8 + 1);
            if (!valid) return -1;
            cols[c].valid = valid;
        }
    }
    return 0;
}

static int set_null(Column *col, int64_t row, size_t cap) {
    if (!col->valid) {
        col->valid = malloc(cap / 8 + 1);
        if (!col->valid) return -1;
        memset(col->valid, 0xFF, (size_t)(row / 8) + 1);
    }
    col->valid[row / 8] &= (uint8_t)~(1u << (row % 8));
    col->nulls++;
    return 0;
}

static void set_valid(Column *col, int64_t row) {
    if (col->valid) col->valid[row / 8] |= (uint8_t)(1u << (row % 8));
}

static int append_bytes(Column *col, const void *p, size_t len) {
    if (col->data_len + len > INT32_MAX) return -2; /* past int32 offsets: read another way */
    if (native_reserve(&col->data, &col->data_cap, col->data_len + len, 1 << 16)) return -1;
    if (len) memcpy(col->data + col->data_len, p, len);
    col->data_len += len;
    return 0;
}

static void free_columns(Column *cols, int ncols) {
    for (int c = 0; c < ncols; c++) {
        free(cols[c].valid);
        free(cols[c].vals);
        free(cols[c].data);
    }
    free(cols);
}

/* -- the read --------------------------------------------------------------------------------- */

enum { READ_OK, READ_SQLITE, READ_TYPE, READ_MEMORY, READ_TOO_BIG };

/* Step ``stmt`` to the end into ``cols``; no Python calls (the GIL is released). */
static int read_rows(sqlite3_stmt *stmt, Column *cols, int ncols, int64_t *rows_out, size_t cap,
                     int *bad_column) {
    int64_t n = 0;
    int rc;
    if (grow_rows(cols, ncols, cap)) return READ_MEMORY;
    for (int c = 0; c < ncols; c++)
        if (cols[c].kind == 's' || cols[c].kind == 'b') ((int32_t *)cols[c].vals)[0] = 0;
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
        if ((size_t)n == cap) {
            cap *= 2;
            if (grow_rows(cols, ncols, cap)) return READ_MEMORY;
        }
        for (int c = 0; c < ncols; c++) {
            Column *col = &cols[c];
            /* One value handle per field: sqlite3_column_* would look the column up per call. */
            sqlite3_value *value = sqlite3_column_value(stmt, c);
            int type = sqlite3_value_type(value);
            if (type == SQLITE_NULL) {
                if (set_null(col, n, cap)) return READ_MEMORY;
                if (col->kind == 's' || col->kind == 'b')
                    ((int32_t *)col->vals)[n + 1] = (int32_t)col->data_len;
                else
                    ((int64_t *)col->vals)[n] = 0;
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
                int err = append_bytes(col, text, len);
                if (err) return err == -2 ? READ_TOO_BIG : READ_MEMORY;
                ((int32_t *)col->vals)[n + 1] = (int32_t)col->data_len;
                break;
            }
            case 'b': {
                if (type != SQLITE_BLOB) goto bad_type;
                const void *blob = sqlite3_value_blob(value);
                size_t len = (size_t)sqlite3_value_bytes(value);
                int err = append_bytes(col, blob, len);
                if (err) return err == -2 ? READ_TOO_BIG : READ_MEMORY;
                ((int32_t *)col->vals)[n + 1] = (int32_t)col->data_len;
                break;
            }
            }
            set_valid(col, n);
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

/* One column as a tuple: (rows, nulls, validity or None, values[, data]). */
static PyObject *column_tuple(Column *col, int64_t n) {
    PyObject *valid = Py_None, *vals = NULL, *data = NULL, *out = NULL;
    Py_INCREF(Py_None);
    if (col->nulls) {
        Py_DECREF(Py_None);
        valid = native_buffer(col->valid, (Py_ssize_t)(n / 8 + 1));
        col->valid = NULL;
        if (!valid) return NULL;
    }
    vals = native_buffer(col->vals, (Py_ssize_t)value_bytes(col->kind, (size_t)n));
    col->vals = NULL;
    if (!vals) goto done;
    if (col->kind == 's' || col->kind == 'b') {
        data = native_buffer(col->data, (Py_ssize_t)col->data_len);
        col->data = NULL;
        if (!data) goto done;
        out = Py_BuildValue("(LLOOO)", (long long)n, (long long)col->nulls, valid, vals, data);
    } else {
        out = Py_BuildValue("(LLOO)", (long long)n, (long long)col->nulls, valid, vals);
    }
done:
    Py_XDECREF(valid);
    Py_XDECREF(vals);
    Py_XDECREF(data);
    return out;
}

static PyObject *Reader_read(Reader *self, PyObject *args) {
    const char *sql, *kinds;
    Py_ssize_t capacity = 1 << 16;
    if (!PyArg_ParseTuple(args, "ss|n", &sql, &kinds, &capacity)) return NULL;
    if (!self->db) {
        PyErr_SetString(Unreadable, "the reader is closed");
        return NULL;
    }
    int ncols = (int)strlen(kinds);
    for (int c = 0; c < ncols; c++) {
        if (!strchr("ifsb", kinds[c])) {
            PyErr_Format(PyExc_ValueError, "unknown column kind %c", kinds[c]);
            return NULL;
        }
    }
    sqlite3_stmt *stmt = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = sqlite3_prepare_v2(self->db, sql, -1, &stmt, NULL);
    Py_END_ALLOW_THREADS
    if (rc != SQLITE_OK) {
        PyErr_Format(Unreadable, "%s", sqlite3_errmsg(self->db));
        sqlite3_finalize(stmt);
        return NULL;
    }
    int columns = sqlite3_column_count(stmt);
    if (columns != ncols) {
        sqlite3_finalize(stmt);
        PyErr_Format(PyExc_ValueError, "the query has %d columns, %d kinds given", columns, ncols);
        return NULL;
    }
    Column *cols = calloc((size_t)(ncols ? ncols : 1), sizeof(Column));
    if (!cols) {
        sqlite3_finalize(stmt);
        return PyErr_NoMemory();
    }
    for (int c = 0; c < ncols; c++) cols[c].kind = kinds[c];
    int64_t n = 0;
    int bad = -1, status;
    size_t cap = capacity > 0 ? (size_t)capacity : 1;
    Py_BEGIN_ALLOW_THREADS
    status = read_rows(stmt, cols, ncols, &n, cap, &bad);
    Py_END_ALLOW_THREADS
    PyObject *out = NULL;
    switch (status) {
    case READ_OK:
        out = PyList_New(ncols);
        for (int c = 0; out && c < ncols; c++) {
            PyObject *col = column_tuple(&cols[c], n);
            if (!col) {
                Py_CLEAR(out);
                break;
            }
            PyList_SET_ITEM(out, c, col);
        }
        break;
    case READ_SQLITE:
        PyErr_Format(Unreadable, "%s", sqlite3_errmsg(self->db));
        break;
    case READ_TYPE:
        PyErr_Format(Unreadable, "column %s holds a value of another type",
                     sqlite3_column_name(stmt, bad));
        break;
    case READ_TOO_BIG:
        PyErr_SetString(Unreadable, "text past 2 GB in one read");
        break;
    default:
        PyErr_NoMemory();
    }
    sqlite3_finalize(stmt);
    free_columns(cols, ncols);
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
        PyErr_SetString(Unreadable, "the reader is closed");
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
        PyErr_Format(Unreadable, "%s", sqlite3_errmsg(self->db));
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
        PyErr_Format(Unreadable, "%s", self->db ? sqlite3_errmsg(self->db) : "cannot open");
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
    {NULL}};

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
    Unreadable = PyErr_NewException("nvbridge._native.Unreadable", NULL, NULL);
    if (!Unreadable || PyModule_AddObjectRef(module, "Unreadable", Unreadable) < 0) return -1;
    if (PyType_Ready(&ReaderType) < 0) return -1;
    return PyModule_AddObjectRef(module, "Reader", (PyObject *)&ReaderType);
}
