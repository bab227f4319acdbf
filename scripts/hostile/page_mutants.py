"""Page-level mutants of an SQLite file: bytes set in its b-tree structures, one family at a time
(scripts/hostile/fuzz_pages.py runs them; tests/test_pages_regress.py replays saved ones).

A mutant is a recipe: the source file's name and sha256, and byte edits (file offset, new bytes)
or a truncation. Recipes of the real exports are kept, never their bytes (they are not the
project's to publish): a replay rebuilds the mutant from ../shared/real_db where it exists.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from scripts.hostile.page_map import Cell, Page, PageMap, Tree, encode_varint, varint

# Tables the readers read (nsys and nvprof), weighted over the others: their damage matters.
READ = ("NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_", "StringIds", "ThreadNames", "StringTable", "TARGET_INFO", "PROCESSES")


@dataclass
class Mutant:
    source: str  # the file's name; where it lives is the caller's
    sha256: str
    family: str
    what: str  # where and what, for a reader
    edits: list[tuple[int, bytes]] = field(default_factory=list)
    truncate: int | None = None

    def apply(self, data: bytes) -> bytes:
        out = bytearray(data)
        for at, value in self.edits:
            out[at : at + len(value)] = value
        return bytes(out[: self.truncate] if self.truncate is not None else out)

    def recipe(self) -> dict[str, object]:
        return {
            "source": self.source,
            "sha256": self.sha256,
            "family": self.family,
            "what": self.what,
            "edits": [[at, value.hex()] for at, value in self.edits],
            "truncate": self.truncate,
        }

    @staticmethod
    def from_recipe(r: dict[str, object]) -> Mutant:
        edits = [(int(at), bytes.fromhex(str(v))) for at, v in r["edits"]]  # type: ignore[attr-defined]
        truncate = r.get("truncate")
        return Mutant(
            str(r["source"]),
            str(r["sha256"]),
            str(r["family"]),
            str(r["what"]),
            edits,
            None if truncate is None else int(truncate),  # type: ignore[call-overload]
        )


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Mutator:
    """Mutants of one file: ``family`` names one of FAMILIES."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.map = PageMap(path)
        self.sha = sha256(path)
        trees = [t for t in self.map.trees.values() if t.cells]
        read = [t for t in trees if t.table.startswith(READ)]
        self.trees = read * 3 + trees  # weighted toward the read tables
        self.interior = [t for t in self.trees if t.interior()]
        self.overflow = [c for t in read for c in t.cells if c.overflow_at is not None]

    def make(self, family: str, rng: random.Random) -> Mutant:
        edits: list[tuple[int, bytes]] = []
        what, truncate = FAMILIES[family](self, rng, edits)
        return Mutant(self.path.name, self.sha, family, what, edits, truncate)

    # -- helpers ---------------------------------------------------------------------------

    def _tree(self, rng: random.Random, interior: bool = False) -> Tree:
        return rng.choice(self.interior if interior and self.interior else self.trees)

    def _u16(self, at: int) -> int:
        return int.from_bytes(self.map.data[at : at + 2], "big")

    def _u32(self, at: int) -> int:
        return int.from_bytes(self.map.data[at : at + 4], "big")

    def _page_number(self, rng: random.Random, tree: Tree, here: Page | None) -> tuple[int, str]:
        """A page number a pointer could be damaged into, and what it is."""
        choices: list[tuple[int, str]] = [
            (0, "0"),
            (self.map.pages + 1, "past the end"),
            (rng.randrange(1, self.map.pages + 1), "a random page"),
            (tree.root, "the tree's root"),
        ]
        if here is not None:
            choices.append((here.pgno, "the page itself"))
        others = [t for t in self.trees if t is not tree and t.leaves()]
        if others:
            choices.append((rng.choice(rng.choice(others).leaves()).pgno, "another table's leaf"))
        if tree.leaves():
            choices.append((rng.choice(tree.leaves()).pgno, "a leaf of the same tree"))
        return rng.choice(choices)


def _cell_pointer(m: Mutator, rng: random.Random, edits: list[tuple[int, bytes]]) -> tuple[str, int | None]:
    tree = m._tree(rng)
    page = rng.choice(tree.pages)
    i = rng.randrange(max(page.ncells, 1))
    at = page.pointers_at + 2 * i
    old = m._u16(at)
    others = [m._u16(page.pointers_at + 2 * k) for k in range(page.ncells)]
    new = rng.choice(
        [old + 1, old - 1, old + rng.randint(2, 40), rng.randrange(0, m.map.page_size), 0, rng.choice(others)]
    )
    edits.append((at, (new & 0xFFFF).to_bytes(2, "big")))
    return f"{tree.table} page {page.pgno} cell pointer {i}: {old} -> {new & 0xFFFF}", None


def _cell(m: Mutator, rng: random.Random) -> tuple[Tree, Cell]:
    tree = m._tree(rng)
    return tree, rng.choice(tree.cells)


def _payload_varint(m: Mutator, rng: random.Random, edits: list[tuple[int, bytes]]) -> tuple[str, int | None]:
    tree, cell = _cell(m, rng)
    old, n = varint(m.map.data, cell.at)
    new = rng.choice([old + 1, max(old - 1, 0), old * 2 + 1, rng.randrange(0, 1 << 20), 0])
    encoded = encode_varint(new)
    if len(encoded) != n:  # keep the cell's length: set the last byte instead
        encoded = bytes([m.map.data[cell.at + n - 1] ^ rng.choice([1, 2, 0x40])])
        edits.append((cell.at + n - 1, encoded))
    else:
        edits.append((cell.at, encoded))
    return f"{tree.table} page {cell.page} rowid {cell.rowid}: payload size {old} -> {encoded.hex()}", None


def _rowid_varint(m: Mutator, rng: random.Random, edits: list[tuple[int, bytes]]) -> tuple[str, int | None]:
    tree, cell = _cell(m, rng)
    _, n = varint(m.map.data, cell.rowid_at)
    last = cell.rowid_at + n - 1
    new = rng.choice([m.map.data[last] ^ 1, m.map.data[last] ^ 0x10, rng.randrange(256), m.map.data[last] | 0x80])
    edits.append((last, bytes([new])))
    return f"{tree.table} page {cell.page} rowid {cell.rowid}: rowid byte -> {new:#x}", None


def _record_header(m: Mutator, rng: random.Random, edits: list[tuple[int, bytes]]) -> tuple[str, int | None]:
    tree, cell = _cell(m, rng)
    if cell.record_at >= len(m.map.data):
        return "no record", None
    if not cell.types_at or rng.random() < 0.25:
        old = m.map.data[cell.record_at]
        new = rng.choice([old + 1, old - 1, 0, rng.randrange(128)]) & 0xFF
        edits.append((cell.record_at, bytes([new])))
        return f"{tree.table} page {cell.page} rowid {cell.rowid}: header size {old} -> {new}", None
    t = rng.choice(cell.types_at)
    old = m.map.data[t]
    new = rng.choice([old + 1, old - 1, old + 2, old - 2, 0, 1, 6, 7, 10, 11, 12, 13, rng.randrange(256)]) & 0xFF
    edits.append((t, bytes([new])))
    return f"{tree.table} page {cell.page} rowid {cell.rowid}: a serial type {old} -> {new}", None


def _overflow(m: Mutator, rng: random.Random, edits: list[tuple[int, bytes]]) -> tuple[str, int | None]:
    if not m.overflow:
        return _random_bytes(m, rng, edits)
    cell = rng.choice(m.overflow)
    assert cell.overflow_at is not None
    at = cell.overflow_at
    first = m._u32(at)
    if rng.random() < 0.5 and 1 <= first <= m.map.pages:
        at = m.map.offset(first)  # the first overflow page's next pointer
    tree = next(t for t in m.trees if cell in t.cells)
    new, kind = m._page_number(rng, tree, None)
    if rng.random() < 0.3:
        others = [c for c in m.overflow if c is not cell and c.overflow_at is not None]
        if others:
            other = rng.choice(others).overflow_at
            assert other is not None
            new, kind = m._u32(other), "another chain's page"
    edits.append((at, new.to_bytes(4, "big")))
    return f"overflow pointer of rowid {cell.rowid} (page {cell.page}): {m._u32(at)} -> {new} ({kind})", None


def _child_pointer(m: Mutator, rng: random.Random, edits: list[tuple[int, bytes]]) -> tuple[str, int | None]:
    tree = m._tree(rng, interior=True)
    pages = tree.interior()
    if not pages:
        return _cell_pointer(m, rng, edits)
    page = rng.choice(pages)
    i = rng.randrange(len(page.child_at))
    new, kind = m._page_number(rng, tree, page)
    if rng.random() < 0.3 and len(page.children) > 1:
        new, kind = rng.choice([c for c in page.children if c != page.children[i]]), "a sibling"
    edits.append((page.child_at[i], new.to_bytes(4, "big")))
    return f"{tree.table} page {page.pgno} child {i}: {page.children[i]} -> {new} ({kind})", None


def _page_type(m: Mutator, rng: random.Random, edits: list[tuple[int, bytes]]) -> tuple[str, int | None]:
    tree = m._tree(rng)
    page = rng.choice(tree.pages)
    new = rng.choice([0x00, 0x02, 0x05, 0x0A, 0x0D, rng.randrange(256)])
    edits.append((page.head, bytes([new])))
    return f"{tree.table} page {page.pgno} type {page.type:#x} -> {new:#x}", None


def _cell_count(m: Mutator, rng: random.Random, edits: list[tuple[int, bytes]]) -> tuple[str, int | None]:
    tree = m._tree(rng)
    page = rng.choice(tree.pages)
    new = rng.choice([0, page.ncells - 1, page.ncells + 1, page.ncells + rng.randint(2, 50), 0xFFFF]) & 0xFFFF
    edits.append((page.head + 3, new.to_bytes(2, "big")))
    return f"{tree.table} page {page.pgno} cell count {page.ncells} -> {new}", None


def _free_space(m: Mutator, rng: random.Random, edits: list[tuple[int, bytes]]) -> tuple[str, int | None]:
    tree = m._tree(rng)
    page = rng.choice(tree.pages)
    field = rng.choice(["first free block", "content start", "fragments"])
    if field == "fragments":
        old = m.map.data[page.head + 7]
        new = rng.choice([old + 1, old - 1, 0, 255, rng.randrange(256)]) & 0xFF
        edits.append((page.head + 7, bytes([new])))
    else:
        at = page.head + (1 if field == "first free block" else 5)
        old = m._u16(at)
        new = rng.choice([old + 1, old - 1, old + rng.randint(4, 200), rng.randrange(m.map.page_size), 0]) & 0xFFFF
        edits.append((at, new.to_bytes(2, "big")))
    return f"{tree.table} page {page.pgno} {field}: {old} -> {new}", None


def _file_header(m: Mutator, rng: random.Random, edits: list[tuple[int, bytes]]) -> tuple[str, int | None]:
    name, at, size = rng.choice(
        [("page count", 28, 4), ("first free-list page", 32, 4), ("free-list pages", 36, 4), ("change counter", 24, 4),
         ("page size", 16, 2), ("reserved bytes", 20, 1), ("schema cookie", 40, 4), ("text encoding", 56, 4),
         ("auto-vacuum", 52, 4), ("version-valid-for", 92, 4)]
    )  # fmt: skip
    old = int.from_bytes(m.map.data[at : at + size], "big")
    new = rng.choice([old + 1, max(old - 1, 0), 0, rng.randrange(1 << (8 * size))]) % (1 << (8 * size))
    edits.append((at, new.to_bytes(size, "big")))
    return f"file header {name}: {old} -> {new}", None


def _truncation(m: Mutator, rng: random.Random, edits: list[tuple[int, bytes]]) -> tuple[str, int | None]:
    tree = m._tree(rng)
    page = rng.choice(tree.pages)
    cut = m.map.offset(page.pgno) + rng.choice([0, rng.randrange(m.map.page_size)])
    return f"cut at byte {cut} (in {tree.table} page {page.pgno})", max(cut, 100)


def _random_bytes(m: Mutator, rng: random.Random, edits: list[tuple[int, bytes]]) -> tuple[str, int | None]:
    tree = m._tree(rng)
    page = rng.choice(tree.pages)
    base = m.map.offset(page.pgno)
    for _ in range(rng.choice([1, 2, 8])):
        at = base + rng.randrange(m.map.page_size)
        edits.append((at, bytes([rng.randrange(256)])))
    return f"{tree.table} page {page.pgno}: {len(edits)} random bytes", None


FAMILIES: dict[str, Callable[[Mutator, random.Random, list[tuple[int, bytes]]], tuple[str, int | None]]] = {
    "cell pointers": _cell_pointer,
    "payload varints": _payload_varint,
    "rowid varints": _rowid_varint,
    "record headers": _record_header,
    "overflow chains": _overflow,
    "child pointers": _child_pointer,
    "page types": _page_type,
    "cell counts": _cell_count,
    "free space": _free_space,
    "file header": _file_header,
    "truncation": _truncation,
    "random bytes": _random_bytes,
}
