"""Every error nvbridge raises on purpose.

    NvbridgeError
    ├── InputError              the user's file or URL cannot be read as a profile
    │   ├── NotAProfileDatabase     missing, not SQLite, another program's SQLite, an .nsys-rep
    │   ├── DamagedDatabase         truncated or malformed SQLite
    │   └── MissingTable            a table or column the reader cannot do without
    ├── CorrelationError        an invariant of the op tree does not hold (a bug, not bad input)
    ├── ExportError             the output cannot be written (exists, not a dataset, ...)
    │   └── DamagedDataset          a dataset file missing, unreadable, of another schema or impossible
    ├── MissingDependency       an optional package (pandas, torch, matplotlib) is not installed
    └── OptionError             an argument that does not fit the input (a GPU it does not have)

Each message is one line that names the problem and the fix; the CLI prints it as
``Error: <message>`` and exits with status 1.
"""

from __future__ import annotations


class NvbridgeError(Exception):
    """Root of every error nvbridge raises on purpose."""


class InputError(NvbridgeError):
    """The input cannot be read as a profiler database."""


class NotAProfileDatabase(InputError):
    """The input is not an nvprof or Nsight Systems SQLite database."""


class DamagedDatabase(InputError):
    """The input is an SQLite database, but truncated or malformed."""


class MissingTable(InputError):
    """A table or column the reader cannot do without is absent."""


class CorrelationError(NvbridgeError):
    """The correlated model breaks one of its invariants."""


class ExportError(NvbridgeError):
    """The output cannot be written or read back."""


class DamagedDataset(ExportError):
    """A dataset directory whose files are missing, unreadable, of another schema, or hold
    rows a conversion never writes (an end before its start)."""


class MissingDependency(NvbridgeError, ModuleNotFoundError):
    """An optional package a feature needs is not installed; the message names the pip install.
    Also a ModuleNotFoundError, so code catching ImportError keeps working."""


class OptionError(NvbridgeError, ValueError):
    """An argument that does not fit the input, such as a device the report does not have."""
