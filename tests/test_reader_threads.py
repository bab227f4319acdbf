"""Reader threads and SQLAlchemy's lazily imported side (issue 24, item 3)."""

from __future__ import annotations

import sqlite3
import sys
import types
from pathlib import Path

import pytest

from nvbridge.errors import DamagedDatabase
from nvbridge.readers._db import Database


def test_error_translated_while_another_thread_imports_sqlalchemy_side(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A damaged-file error raised on one reader thread while another thread is still importing
    ``_generic`` (in ``sys.modules`` but not yet initialized: no ``DatabaseError``) must still be
    the one-line DamagedDatabase, not an AttributeError from the half-made module."""
    path = tmp_path / "r.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    con.commit()
    con.close()
    half_imported = types.ModuleType("nvbridge.readers._generic")  # what another thread's import leaves meanwhile
    monkeypatch.setitem(sys.modules, "nvbridge.readers._generic", half_imported)
    with Database(path) as db:
        with pytest.raises(DamagedDatabase, match=r"r\.sqlite cannot be read \(disk I/O"):
            with db.translate_errors():
                raise sqlite3.DatabaseError("disk I/O error")
