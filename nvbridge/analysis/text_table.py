"""Plain-text tables that fit a terminal: summary's torch-style table, its FLOPs table and the
kernel table.

A column is as wide as its widest cell, up to a cap (a longer cell is cut with ``...``, as
torch cuts names). Given a width (the terminal's, or ``COLUMNS``), a table too wide is fitted
losing as little as it can, in this order: headers wrap onto two lines; the name column narrows
to NAME_SOFT; the columns that can go are dropped, the least useful first (the caller prints a
note naming them); the name column narrows to NAME_HARD. A table that still does not fit is
printed as narrow as that. Without a width (output to a pipe or a file), nothing is fitted.
"""

from __future__ import annotations

import hashlib
import os
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

NAME_SOFT = 40  # the name column narrows to this before any column is dropped
NAME_HARD = 24  # and to this once every column that can go has gone
GAP = "  "
SEPARATORS = " ,<(:"  # where a word of a C++ name or a path starts, for cuts that keep words whole
# torch's key_averages columns after Name, with the order they are left out in to fit (0: kept):
# the shares and averages first (their totals stay), Self CPU, Self CUDA and the calls never
TORCH_COLUMNS = (
    ("Self CPU %", 2),
    ("Self CPU", 0),
    ("CPU total %", 1),
    ("CPU total", 5),
    ("CPU time avg", 3),
    ("Self CUDA", 0),
    ("Self CUDA %", 6),
    ("CUDA total", 7),
    ("CUDA time avg", 4),
    ("# of Calls", 0),
)


@dataclass(frozen=True)
class Column:
    """A column: its title, alignment, widest cell shown, and whether it may go or narrow."""

    title: str
    left: bool = False  # names and text; numbers are right-aligned
    cap: int = 80
    drop: int = 0  # 0: always shown; else dropped to fit, lowest first
    narrows: bool = False  # may narrow (the name column): cells cut with "..."


@dataclass(frozen=True)
class Table:
    """The fitted table: its lines and the titles of the columns left out to fit."""

    lines: list[str]
    dropped: list[str]

    def note(self, width: int | None) -> str | None:
        """The line saying which columns were left out, or None."""
        if not self.dropped:
            return None
        text = (
            f"({', '.join(self.dropped)} left out to fit {width} columns; set COLUMNS wider, "
            "or use --csv or --json for every column)"
        )
        return textwrap.fill(text, width) if width else text


def _split(title: str) -> tuple[str, str]:
    """The title on two lines, as narrow as a split at a space makes it ("", title: no space)."""
    best = ("", title)
    for i, ch in enumerate(title):
        if ch == " " and max(i, len(title) - i - 1) < max(len(best[0]), len(best[1])):
            best = (title[:i], title[i + 1 :])
    return best


def cut(texts: Sequence[str], width: int, marker: str = "...") -> list[str]:
    """Each text cut to ``width`` characters, ending in ``marker`` where cut. Texts a plain cut
    would make identical (kernel names sharing a long template prefix) show where they differ
    instead: their head, the marker, and a stretch of the rest that no other text has after
    that head (see :func:`_told_apart`), so distinct texts never read the same."""
    room = max(width - len(marker), 0)
    out = [t if len(t) <= width else t[:room] + marker for t in texts]
    groups: dict[str, set[str]] = {}
    for t, short in zip(texts, out):
        if short != t:
            groups.setdefault(short, set()).add(t)
    shown: dict[str, str] = {}
    everyone = sorted(set(texts))
    for same in (sorted(g) for g in groups.values() if len(g) > 1):  # a few, where names collide
        shown.update(_told_apart(same, everyone, width, marker))
    return [shown.get(t, short) for t, short in zip(texts, out)]


def _told_apart(texts: list[str], everyone: list[str], width: int, marker: str) -> dict[str, str]:
    """``texts`` (distinct, sorted, each longer than ``width``) cut so that each reads as itself:
    its head, the marker, then a stretch of the rest found after that head in no other text of
    ``everyone`` (tried from the word where it parts from its nearest text, around that point,
    from each later word, and at its end); a short hash of the text where no stretch is its own."""
    shared = [len(os.path.commonprefix([a, b])) for a, b in zip(texts, texts[1:])]
    parts = [max(left, right) for left, right in zip([0, *shared], [*shared, 0])]
    head = max(width - 2 * len(marker), 0) // 3
    span = max(width - head - 2 * len(marker), 0)
    out = {}
    for t, p in zip(texts, parts):
        word = max(t.rfind(sep, head, p) for sep in SEPARATORS) + 1  # the word it parts in, whole
        words = [i + 1 for i, ch in enumerate(t) if ch in SEPARATORS and i >= head]  # then any word's
        for start in (word, p - span // 2, *words, len(t) - span):
            start = max(head, min(start, len(t) - span))
            stretch = t[start : start + span]
            others = [o for o in everyone if o != t and o.startswith(t[:head]) and stretch in o[head:]]
            if not others:
                out[t] = t[:head] + marker + stretch + (marker if start + span < len(t) else "")
                break
        else:
            room = max(width - len(marker), 0)
            out[t] = t[: max(room - 7, 0)] + marker + "#" + hashlib.sha1(t.encode()).hexdigest()[:6]
    return out


def fit(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int | None = None) -> Table:
    """Lines of ``rows`` under ``columns`` (rule, header, rule, rows, rule), fitted to ``width``.

    Args:
        columns: the columns, in order.
        rows: the cells, one list per row, one string per column.
        width: the columns the lines must fit (None: no limit).
    """
    cells = [min(max((len(r[i]) for r in rows), default=0), c.cap) for i, c in enumerate(columns)]
    droppable = sorted((c.drop, i) for i, c in enumerate(columns) if c.drop)
    stages: list[tuple[int, bool, int | None]] = [(0, False, None), (0, True, None)]
    stages += [(k, True, NAME_SOFT) for k in range(len(droppable) + 1)]
    stages.append((len(droppable), True, NAME_HARD))
    for n_drop, wrap, name_min in stages:
        gone = {i for _, i in droppable[:n_drop]}
        keep = [i for i in range(len(columns)) if i not in gone]
        widths = _widths(columns, cells, keep, wrap, name_min, width)
        if width is None or sum(widths.values()) + len(GAP) * (len(keep) - 1) <= width:
            break
    return Table(_lines(columns, rows, keep, widths, wrap), [columns[i].title for i in sorted(gone)])


def _widths(
    columns: Sequence[Column], cells: list[int], keep: list[int], wrap: bool, name_min: int | None, width: int | None
) -> dict[int, int]:
    """Each kept column's width: its widest cell (capped) or its header, whose wider line is all
    a wrapped header needs; narrowing columns give up what the table exceeds ``width`` by, down
    to ``name_min``."""
    out = {}
    for i in keep:
        head = max(map(len, _split(columns[i].title))) if wrap else len(columns[i].title)
        out[i] = max(head, cells[i], 1)
    if name_min is None or width is None:
        return out
    excess = sum(out.values()) + len(GAP) * (len(keep) - 1) - width
    for i in keep:
        if columns[i].narrows and excess > 0:
            floor = min(out[i], max(name_min, max(map(len, _split(columns[i].title)))))
            give = min(out[i] - floor, excess)
            out[i] -= give
            excess -= give
    return out


def _lines(
    columns: Sequence[Column], rows: Sequence[Sequence[str]], keep: list[int], widths: dict[int, int], wrap: bool
) -> list[str]:
    shown = {i: cut([r[i] for r in rows], widths[i]) for i in keep}  # distinct cells stay distinct

    def line(cells: list[str]) -> str:
        out = [cell.ljust(widths[i]) if columns[i].left else cell.rjust(widths[i]) for i, cell in zip(keep, cells)]
        return GAP.join(out).rstrip()

    heads = [(("", columns[i].title) if len(columns[i].title) <= widths[i] else _split(columns[i].title)) for i in keep]
    rule = "-" * (sum(widths[i] for i in keep) + len(GAP) * (len(keep) - 1))
    header = [line([h[1] for h in heads])]
    if wrap and any(h[0] for h in heads):
        header.insert(0, line([h[0] for h in heads]))
    return [rule, *header, rule, *(line([shown[i][j] for i in keep]) for j in range(len(rows))), rule]
