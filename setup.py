"""The compiled part of nvbridge: everything else is in pyproject.toml.

``nvbridge._native`` is optional: where it cannot be built (no C compiler or SQLite headers),
installation goes on and nvbridge reads through ConnectorX and NumPy instead, more slowly.
"""

from pathlib import Path

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "nvbridge._native",
            sources=sorted(str(p) for p in Path("native").glob("*.c")),
            depends=sorted(str(p) for p in Path("native").glob("*.h")),
            libraries=["sqlite3"],
            # -Wall -Wextra: the page reader parses untrusted files; tests/test_pages_warnings.py
            # keeps native/ free of warnings under these flags.
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra"],
            optional=True,
        )
    ]
)
