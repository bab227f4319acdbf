/* The nvbridge._native module: owned buffers, and the functions each source file adds. */
#include "native.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    PyObject_HEAD
    void *data;
    Py_ssize_t size;
} Buffer;

static int Buffer_getbuffer(Buffer *self, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)self, self->data ? self->data : (void *)"", self->size, 0, flags);
}

/* tracemalloc domain of these buffers: memory diagnostics see them beside NumPy's (389047). */
#define NATIVE_DOMAIN 0x6e76

static void Buffer_dealloc(Buffer *self) {
    if (self->data) PyTraceMalloc_Untrack(NATIVE_DOMAIN, (uintptr_t)self->data);
    free(self->data);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyBufferProcs Buffer_as_buffer = {(getbufferproc)Buffer_getbuffer, NULL};

static PyTypeObject BufferType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nvbridge._native.Buffer",
    .tp_basicsize = sizeof(Buffer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Memory owned by nvbridge._native, read through the buffer protocol.",
    .tp_dealloc = (destructor)Buffer_dealloc,
    .tp_as_buffer = &Buffer_as_buffer,
};

PyObject *native_buffer(void *data, Py_ssize_t size) {
    Buffer *buf = PyObject_New(Buffer, &BufferType);
    if (!buf) {
        free(data);
        return NULL;
    }
    buf->data = data;
    buf->size = size;
    if (data) PyTraceMalloc_Track(NATIVE_DOMAIN, (uintptr_t)data, (size_t)size);
    return (PyObject *)buf;
}

/* Well-formed UTF-8 (no overlongs, no surrogates, nothing past U+10FFFF), as Arrow requires of
 * its string arrays. ASCII, nearly all of a profile's text, is checked eight bytes at a time. */
int native_utf8_valid(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (!(w & 0x8080808080808080ULL)) {
                i += 8;
                continue;
            }
        }
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
        } else if (c >= 0xC2 && c <= 0xDF) {
            if (i + 1 >= n || (s[i + 1] & 0xC0) != 0x80) return 0;
            i += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (i + 2 >= n || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80) return 0;
            if (c == 0xE0 && s[i + 1] < 0xA0) return 0; /* overlong */
            if (c == 0xED && s[i + 1] > 0x9F) return 0; /* surrogate */
            i += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (i + 3 >= n || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80 ||
                (s[i + 3] & 0xC0) != 0x80)
                return 0;
            if (c == 0xF0 && s[i + 1] < 0x90) return 0; /* overlong */
            if (c == 0xF4 && s[i + 1] > 0x8F) return 0; /* past U+10FFFF */
            i += 4;
        } else {
            return 0;
        }
    }
    return 1;
}

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "nvbridge._native",
    .m_doc = "nvbridge's compiled loops (optional: every caller has a pure-Python path).",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__native(void) {
    if (PyType_Ready(&BufferType) < 0) return NULL;
    PyObject *module = PyModule_Create(&native_module);
    if (!module) return NULL;
    if (PyModule_AddIntConstant(module, "TRACEMALLOC_DOMAIN", NATIVE_DOMAIN) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    if (native_add_reader(module) < 0 || native_add_pages(module) < 0 || native_add_names(module) < 0 || native_add_tree(module) < 0 ||
        native_add_rows(module) < 0 || native_add_store(module) < 0 ||
        native_add_lines(module) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
