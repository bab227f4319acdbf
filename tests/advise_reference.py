"""The independent side of advise's tests: the exports they read, raw SQL on them, interval
arithmetic with plain loops (independent of nvbridge.analysis.spans), findings by kind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nvbridge.analysis.advise import Advice, Finding
from tests.conftest import SAMPLE_DB
from tests.conftest import raw as raw_sql
from tests.raw_gpu import length, union

FSDP = "nsys-2026.2-pytorch2-fsdp-2gpu.sqlite"
LM = "nvprof-2020-pytorch14-pyprof-lm.sqlite"
PYPROF = "nsys-2024.2-pyprof-markers.sqlite"
ADVISE = SAMPLE_DB / "advise_cpu+synthetic_gpu.sqlite"
PID = "(globalPid >> 24) & 16777215"  # nsys globalPid/globalTid -> OS pid


def raw(path: Path, sql: str) -> list[tuple[Any, ...]]:
    """Rows of raw SQL on the export (read-only), values as sqlite3 gives them."""
    return raw_sql(path, sql)


def minus(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    """Length of a not covered by b."""
    return length(a) - sum(max(0, min(e, f) - max(s, t)) for s, e in union(a) for t, f in union(b))


def subtract(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The intervals of a not covered by b (plain loop)."""
    out = union(a)
    for t, f in union(b):
        out = [piece for s, e in out for piece in ((s, min(e, t)), (max(s, f), e)) if piece[1] > piece[0]]
    return out


def _of(advice: Advice, kind: str) -> list[Finding]:
    return [f for f in advice.findings if f.kind == kind]
