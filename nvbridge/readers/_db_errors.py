"""The one place a profiler database's errors are translated: driver errors, rows refused and
damaged pages become one-line nvbridge errors naming the file and the fix."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from nvbridge.errors import DamagedDatabase, NotAProfileDatabase
from nvbridge.readers._tally import PagesDamaged
from nvbridge.readers.validate import BadRows


@contextlib.contextmanager
def translated(name: str, driver_errors: Callable[[], tuple[type[BaseException], ...]]) -> Iterator[None]:
    """Turn driver errors into one-line nvbridge errors naming the file ``name``.

    ``driver_errors`` is asked when an error arrives, not before: SQLAlchemy's error class joins
    them once a read inside the block has imported it (nvbridge.readers._db.Database._sqlalchemy)."""
    try:
        yield
    except BadRows as exc:
        raise DamagedDatabase(f"{name}: {exc}") from exc
    except PagesDamaged as exc:  # never read through SQLite instead: see _tally.PagesDamaged
        raise DamagedDatabase(f"{name}: {exc}; the file is damaged, export it again.") from exc
    except driver_errors() as exc:
        detail = str(getattr(exc, "orig", exc)).splitlines()[0]
        if "locked" in detail or "busy" in detail or "readonly" in detail or "read-only" in detail:
            raise DamagedDatabase(
                f"{name} is locked / in use by another program ({detail}); wait until it finishes, or convert a copy."
            ) from exc
        if "not a database" in detail or "file is encrypted" in detail:
            raise NotAProfileDatabase(
                f"{name} is not an SQLite database; export the profile with "
                "`nsys export --type sqlite` or `nvprof -o profile.sqlite`."
            ) from exc
        raise DamagedDatabase(f"{name} cannot be read ({detail}); the file is damaged, export it again.") from exc
    except UnicodeDecodeError as exc:  # damage in the schema's own text (table or column names)
        raise DamagedDatabase(
            f"{name} cannot be read (its schema holds text that is not UTF-8); the file is damaged, export it again."
        ) from exc
