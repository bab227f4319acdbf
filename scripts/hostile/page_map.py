"""Where things are in an SQLite file's table b-trees, read with Python alone (no nvbridge, no
SQLite beyond the schema's root pages): the page-level fuzzer (scripts/hostile/fuzz_pages.py) and the
page reader's damage tests (tests/test_pages_damage.py) build their mutants from it.

A :class:`PageMap` lists, for each table b-tree, its pages (depth, type, cell pointers) and its
leaf cells (offset, payload size and rowid varints, record header, overflow pointer), as file
offsets a mutant can set bytes at. It follows SQLite's file format document (fileformat2.html):
a page header of 8 (leaf) or 12 (interior) bytes, 100 bytes later on page 1.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path


def varint(data: bytes | bytearray, at: int) -> tuple[int, int]:
    """An SQLite varint at ``at``: (value, length)."""
    v = 0
    for k in range(9):
        c = data[at + k]
        if k == 8:
            return (v << 8) | c, 9
        v = (v << 7) | (c & 0x7F)
        if not c & 0x80:
            return v, k + 1
    raise AssertionError


def encode_varint(v: int) -> bytes:
    out = [v & 0x7F]
    v >>= 7
    while v:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    return bytes(reversed(out))


@dataclass
class Cell:
    """A table leaf cell: file offsets of its parts."""

    page: int
    at: int  # the cell's file offset
    payload_size: int
    rowid: int
    rowid_at: int
    record_at: int  # the record (its header size varint)
    header_size: int
    types_at: list[int]  # each serial type varint's file offset
    overflow_at: int | None  # the first overflow page number's file offset


@dataclass
class Page:
    pgno: int
    depth: int
    type: int
    head: int  # the page header's file offset
    ncells: int
    pointers_at: int  # the cell pointer array's file offset
    children: list[int] = field(default_factory=list)  # interior: child page numbers, right-most last
    child_at: list[int] = field(default_factory=list)  # their file offsets


@dataclass
class Tree:
    table: str
    root: int
    pages: list[Page]
    cells: list[Cell]

    def leaves(self) -> list[Page]:
        return [p for p in self.pages if p.type == 0x0D]

    def interior(self) -> list[Page]:
        return [p for p in self.pages if p.type == 0x05]


class PageMap:
    """The table b-trees of the SQLite file ``path``."""

    def __init__(self, path: Path) -> None:
        self.data = path.read_bytes()
        d = self.data
        self.page_size = 65536 if int.from_bytes(d[16:18], "big") == 1 else int.from_bytes(d[16:18], "big")
        self.usable = self.page_size - d[20]
        self.pages = len(d) // self.page_size
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            sql = "SELECT name, rootpage FROM sqlite_master WHERE type = 'table' AND rootpage > 0"
            rows = con.execute(sql).fetchall()
        finally:
            con.close()
        self.trees = {str(name): self._tree(str(name), int(root)) for name, root in rows}

    def offset(self, pgno: int) -> int:
        return (pgno - 1) * self.page_size

    def _tree(self, table: str, root: int) -> Tree:
        tree = Tree(table, root, [], [])
        stack = [(root, 0)]
        while stack:
            pgno, depth = stack.pop()
            page = self._page(pgno, depth)
            if page is None:
                continue
            tree.pages.append(page)
            if page.type == 0x05:
                stack.extend((c, depth + 1) for c in reversed(page.children))
            else:
                tree.cells.extend(self._cells(page))
        return tree

    def _page(self, pgno: int, depth: int) -> Page | None:
        if not 1 <= pgno <= self.pages or depth > 30:
            return None
        d, base = self.data, self.offset(pgno)
        head = base + (100 if pgno == 1 else 0)
        kind = d[head]
        if kind not in (0x05, 0x0D):
            return None
        ncells = int.from_bytes(d[head + 3 : head + 5], "big")
        ptrs = head + (12 if kind == 0x05 else 8)
        page = Page(pgno, depth, kind, head, ncells, ptrs)
        if kind == 0x05:
            for i in range(ncells):
                cell = base + int.from_bytes(d[ptrs + 2 * i : ptrs + 2 * i + 2], "big")
                page.children.append(int.from_bytes(d[cell : cell + 4], "big"))
                page.child_at.append(cell)
            page.children.append(int.from_bytes(d[head + 8 : head + 12], "big"))
            page.child_at.append(head + 8)
        return page

    def _cells(self, page: Page) -> list[Cell]:
        d, base, out = self.data, self.offset(page.pgno), []
        for i in range(page.ncells):
            at = base + int.from_bytes(d[page.pointers_at + 2 * i : page.pointers_at + 2 * i + 2], "big")
            size, a = varint(d, at)
            rowid, b = varint(d, at + a)
            record = at + a + b
            header, k = varint(d, record)
            types, t = [], record + k
            while t < record + header:
                types.append(t)
                t += varint(d, t)[1]
            local = _local(size, self.usable)
            overflow = record + local if local < size else None
            rowid = rowid if rowid < 1 << 63 else rowid - (1 << 64)
            out.append(Cell(page.pgno, at, size, rowid, at + a, record, header, types, overflow))
        return out


def _local(size: int, usable: int) -> int:
    x, m = usable - 35, (usable - 12) * 32 // 255 - 23
    if size <= x:
        return size
    k = m + (size - m) % (usable - 4)
    return k if k <= x else m
