"""nvbridge's compiled loops, where they were built: ``nvbridge._native`` (C sources in native/).

Every caller keeps a NumPy/Arrow path that gives the same result, for installs without a C
compiler or SQLite's headers (setup.py builds the extension as optional). Imports nothing of
nvbridge, like :mod:`nvbridge.columns`.
"""

from __future__ import annotations

from types import ModuleType

native: ModuleType | None
try:
    from nvbridge import _native as native
except ImportError:
    native = None
