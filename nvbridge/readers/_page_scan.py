"""The page reader's calls, typed: one frozen dataclass per call of ``nvbridge._native.Pages``
(``scan``, ``chunk_spans``), checked where it is built. native/page_args.c checks the same shapes
again (keyword-only arguments, exact tuples, ints that are not bools): a wrong shape is a
TypeError on either side, never a positional guess in C."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nvbridge._native import Buffer, Pages

Span = tuple[int, int]
# (record position, values, NULL passes); (record position, lo or None, hi or None, NULL passes)
PosMember = tuple[int, tuple[int, ...], bool]
PosBound = tuple[int, int | None, int | None, bool]
_KINDS = frozenset("ifsb")


def _int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _ints(v: object) -> bool:
    return isinstance(v, tuple) and all(_int(x) for x in v)


def _require(ok: bool, what: str) -> None:
    if not ok:
        raise TypeError(what)


def _member_ok(m: object) -> bool:
    return isinstance(m, tuple) and len(m) == 3 and _int(m[0]) and _ints(m[1]) and isinstance(m[2], bool)


def _bound_ok(b: object) -> bool:
    return (
        isinstance(b, tuple)
        and len(b) == 4
        and _int(b[0])
        and all(x is None or _int(x) for x in b[1:3])
        and isinstance(b[3], bool)
    )


@dataclass(frozen=True, slots=True)
class Tally:
    """The rows a page-reader call passed (kept or not) inside the rowids it examined whole
    (``covered``: an inclusive (lo, hi), None for an open end; None when not one interval),
    and the least and greatest rowid among them: the cross-check's figures."""

    covered: tuple[int | None, int | None] | None
    passed: int
    lo: int | None
    hi: int | None


@dataclass(frozen=True, slots=True)
class PageScan:
    """One ``Pages.scan``: ``positions`` and ``kinds`` per output column (-1: the rowid),
    ``spans`` (sorted, disjoint, inclusive; None: every rowid), the filters by record position,
    and for a window (``count`` >= 0) the ``count`` rows from rowid ``first`` on."""

    table: str
    root: int
    positions: tuple[int, ...]
    kinds: str
    spans: tuple[Span, ...] | None = None
    alias: int = -1
    member: PosMember | None = None
    bound: PosBound | None = None
    first: int = 0
    count: int = -1

    def __post_init__(self) -> None:
        _require(isinstance(self.table, str) and _int(self.root) and self.root >= 1, "PageScan: a table and root page")
        _require(_ints(self.positions), "PageScan.positions: a tuple of record positions")
        _require(
            isinstance(self.kinds, str) and len(self.kinds) == len(self.positions) and set(self.kinds) <= _KINDS,
            "PageScan.kinds: one of 'ifsb' per position",
        )
        _require(
            self.spans is None
            or (
                isinstance(self.spans, tuple)
                and all(isinstance(s, tuple) and len(s) == 2 and _ints(s) for s in self.spans)
            ),
            "PageScan.spans: a tuple of (lo, hi) int pairs, or None",
        )
        _require(self.member is None or _member_ok(self.member), "PageScan.member: (position, tuple of ints, bool)")
        _require(
            self.bound is None or _bound_ok(self.bound), "PageScan.bound: (position, int or None, int or None, bool)"
        )
        _require(_int(self.alias) and _int(self.first) and _int(self.count), "PageScan: alias, first, count are ints")
        _require(self.count < 0 or self.spans is None, "PageScan: a window takes no spans")

    def window(self, first: int, count: int) -> PageScan:
        """The same read as a window: ``count`` rows from rowid ``first`` on."""
        return dataclasses.replace(self, spans=None, first=int(first), count=int(count))

    def run(self, pages: Pages) -> tuple[list[tuple[object, ...]], int | None, Tally]:
        """The columns, the rowid after a window (None: none, or not a window), the tally.

        Raises:
            nvbridge._native.Damaged: a page SQLite's checks call corrupt.
            nvbridge._native.Unreadable: a read it leaves to SQLite.
        """
        columns, stop, passed, lo, hi = pages.scan(
            root=self.root,
            positions=self.positions,
            kinds=self.kinds,
            spans=self.spans,
            alias=self.alias,
            member=self.member,
            bound=self.bound,
            first=self.first,
            count=self.count,
        )
        if self.count >= 0:
            covered: tuple[int | None, int | None] | None = (self.first, None if stop is None else stop - 1)
        elif self.spans is None:
            covered = (None, None)
        else:
            covered = self.spans[0] if len(self.spans) == 1 else None
        return columns, stop, Tally(covered, passed, lo, hi)


@dataclass(frozen=True, slots=True)
class ChunkScan:
    """One ``Pages.chunk_spans``: per rowid chunk of ``size`` (``n`` of them from ``first``,
    rowids to ``last``), the figures of the ``start`` column and the ``latest`` one (counted
    where the ``gate`` column holds one of ``gates``), of the rows ``member`` keeps."""

    table: str
    root: int
    first: int
    last: int
    size: int
    n: int
    start: int
    latest: int = -1
    gate: int = -1
    gates: tuple[int, ...] = ()
    alias: int = -1
    member: PosMember | None = None

    def __post_init__(self) -> None:
        _require(isinstance(self.table, str) and _int(self.root) and self.root >= 1, "ChunkScan: a table and root page")
        numbers = (self.first, self.last, self.size, self.n, self.start, self.latest, self.gate, self.alias)
        _require(all(_int(v) for v in numbers), "ChunkScan: rowids, sizes and positions are ints")
        _require(_ints(self.gates), "ChunkScan.gates: a tuple of ints")
        _require(self.member is None or _member_ok(self.member), "ChunkScan.member: (position, tuple of ints, bool)")

    def run(self, pages: Pages) -> tuple[Buffer | None, Tally]:
        """The int64 buffer [5][n] (None: a start or latest that is not an integer) and the tally
        (its ``covered`` None where the figures stopped early).

        Raises:
            nvbridge._native.Damaged, nvbridge._native.Unreadable: as PageScan.run.
        """
        kwargs: dict[str, Any] = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "table"}
        spans, passed, lo, hi = pages.chunk_spans(**kwargs)
        return spans, Tally((self.first, self.last) if spans is not None else None, passed, lo, hi)
