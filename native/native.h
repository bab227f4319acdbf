/* nvbridge._native: the few loops NumPy and Arrow cannot express without a Python object or a
 * pass per row. Each source file adds its functions to the module. */
#ifndef NVBRIDGE_NATIVE_H
#define NVBRIDGE_NATIVE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* A Python object owning ``data`` (from malloc; freed with the object), exposing it through the
 * buffer protocol, so pyarrow and NumPy wrap it without a copy. */
PyObject *native_buffer(void *data, Py_ssize_t size);

int native_add_reader(PyObject *module);
int native_add_names(PyObject *module);
int native_add_tree(PyObject *module);
int native_add_rows(PyObject *module);
int native_add_store(PyObject *module);
int native_add_lines(PyObject *module);

#endif
