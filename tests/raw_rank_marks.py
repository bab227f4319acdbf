"""emit_nvtx's rank marks read with raw SQL (the independent side): per process id, the text of
its marks in a domain created with the name ``nvbridge``, and the ranks docs/cli.md numbers."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import raw


def marks(path: Path) -> dict[int, str]:
    """pid -> text of its last mark in the ``nvbridge`` domain (none for a file without NVTX)."""
    if not raw(path, "SELECT 1 FROM sqlite_master WHERE name = 'NVTX_EVENTS'"):
        return {}
    rows = raw(
        path,
        "SELECT m.globalTid >> 24 & 16777215, m.text FROM NVTX_EVENTS m JOIN NVTX_EVENTS d "
        "ON d.eventType = 75 AND d.text = 'nvbridge' AND d.domainId = m.domainId "
        "AND (d.globalTid >> 24) = (m.globalTid >> 24) WHERE m.eventType = 34 ORDER BY m.start",
    )
    return {int(pid): str(text) for pid, text in rows}


def numbered(path: Path, pids: list[int]) -> list[tuple[int, int]]:
    """(rank, pid) for ``pids`` in inferred order: a process that marked its rank is that rank,
    the others take the numbers left, in order."""
    marked = {pid: int(text.split()[1]) for pid, text in marks(path).items() if pid in pids}
    free = iter(n for n in range(2 * len(pids) + 1) if n not in marked.values())
    return [(marked[p] if p in marked else next(free), p) for p in pids]
