"""The compiled part of nvbridge: everything else is in pyproject.toml.

``nvbridge._native`` is optional: where it cannot be built (no C compiler or SQLite headers),
installation goes on and nvbridge reads through ConnectorX and NumPy instead, more slowly.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "nvbridge._native",
            sources=["native/module.c", "native/sqlite_read.c", "native/names.c", "native/tree.c", "native/rows.c", "native/store.c", "native/lines.c"],
            depends=["native/native.h"],
            libraries=["sqlite3"],
            extra_compile_args=["-O2", "-std=c11"],
            optional=True,
        )
    ]
)
