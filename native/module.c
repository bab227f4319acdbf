/* The nvbridge._native module: owned buffers, and the functions each source file adds. */
#include "native.h"

#include <stdint.h>
#include <stdlib.h>

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
    if (native_add_reader(module) < 0 || native_add_names(module) < 0 || native_add_tree(module) < 0 ||
        native_add_rows(module) < 0 || native_add_store(module) < 0 ||
        native_add_lines(module) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
