/* Arrow-layout column buffers: allocation, growth and hand-over to Python (columns.h). */
#include "columns.h"

static size_t value_bytes(char kind, size_t rows) {
    return (kind == 's' || kind == 'b') ? (rows + 1) * sizeof(int32_t) : rows * sizeof(int64_t);
}

Column *columns_new(const char *kinds, int ncols) {
    for (int c = 0; c < ncols; c++) {
        if (!strchr("ifsb", kinds[c])) {
            PyErr_Format(PyExc_ValueError, "unknown column kind %c", kinds[c]);
            return NULL;
        }
    }
    Column *cols = calloc(ncols > 0 ? (size_t)ncols : 1, sizeof(Column));
    if (!cols) return (Column *)PyErr_NoMemory();
    for (int c = 0; c < ncols; c++) cols[c].kind = kinds[c];
    return cols;
}

int columns_grow(Column *cols, int ncols, size_t rows) {
    for (int c = 0; c < ncols; c++) {
        int first = cols[c].vals == NULL;
        char *vals = realloc(cols[c].vals, value_bytes(cols[c].kind, rows));
        if (!vals) return -1;
        cols[c].vals = vals;
        if (first && (cols[c].kind == 's' || cols[c].kind == 'b')) ((int32_t *)vals)[0] = 0;
        if (cols[c].valid) {
            uint8_t *valid = realloc(cols[c].valid, rows / 8 + 1);
            if (!valid) return -1;
            cols[c].valid = valid;
        }
    }
    return 0;
}

void columns_free(Column *cols, int ncols) {
    for (int c = 0; c < ncols; c++) {
        free(cols[c].valid);
        free(cols[c].vals);
        free(cols[c].data);
    }
    free(cols);
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

PyObject *columns_list(Column *cols, int ncols, int64_t n) {
    PyObject *out = PyList_New(ncols);
    for (int c = 0; out && c < ncols; c++) {
        PyObject *col = column_tuple(&cols[c], n);
        if (!col) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, c, col);
    }
    return out;
}
