"""Types of nvbridge._native (nvbridge/_native/*.c), the optional compiled loops."""

import os
from typing import Any

Buffer = Any

class Unreadable(Exception): ...

class Reader:
    """A read-only SQLite connection for one thread."""

    def __init__(self, uri: str, mmap_bytes: int = 0) -> None: ...
    def read(self, sql: str, kinds: str, capacity: int = 65536) -> list[tuple[object, ...]]: ...
    def chunk_spans(self, sql: str, first: int, size: int, n: int) -> Buffer | None: ...
    def close(self) -> None: ...

class Damaged(Exception): ...

class Pages:
    """An SQLite file's table b-trees, read-only, for one thread."""

    def __init__(self, path: str | os.PathLike[str]) -> None: ...
    def scan(
        self,
        *,
        root: int,
        positions: tuple[int, ...],
        kinds: str,
        spans: tuple[tuple[int, int], ...] | None = None,
        alias: int = -1,
        member: tuple[int, tuple[int, ...], bool] | None = None,
        bound: tuple[int, int | None, int | None, bool] | None = None,
        first: int = 0,
        count: int = -1,
    ) -> tuple[list[tuple[object, ...]], int | None, int, int | None, int | None]: ...
    def chunk_spans(
        self,
        *,
        root: int,
        first: int,
        last: int,
        size: int,
        n: int,
        start: int,
        latest: int = -1,
        gate: int = -1,
        gates: tuple[int, ...] = (),
        alias: int = -1,
        member: tuple[int, tuple[int, ...], bool] | None = None,
    ) -> tuple[Buffer | None, int, int | None, int | None]: ...
    def survey(self, roots: tuple[int, ...], *, known: bytes | None = None) -> tuple[bytes, tuple[int, ...]]: ...
    def close(self) -> None: ...

def split_names(offsets: Buffer, data: Buffer, first: int, n: int) -> tuple[Buffer, Buffer, Buffer, Buffer]: ...
def build_tree(
    thread: Buffer, start: Buffer, end: Buffer, cross: Buffer, api_thread: Buffer, api_start: Buffer, api_end: Buffer
) -> tuple[Buffer, Buffer, Buffer, Buffer]: ...
def duplicates(*columns: Buffer) -> int: ...

class Store:
    """The latest forward op per key (op id and four pool ids), evictable by stamp."""

    def __init__(self, seq_bits: int = 40) -> None: ...
    def put(self, keys: Buffer, seq: Buffer, values: Buffer, stamp: int = 0) -> None: ...
    def get(self, keys: Buffer, seq: Buffer) -> Buffer: ...
    def evict(self, before: int) -> int: ...
    def evicted(self, keys: Buffer, seq: Buffer) -> Buffer: ...
    def __len__(self) -> int: ...

LITERAL: int
INT: int
MICROS: int
TEXT: int
DICT: int
CHOICE: int
IF: int
RAW: int

def format_lines(n: int, segments: list[tuple[object, ...]]) -> Buffer: ...
def roll_up(
    parent: Buffer,
    carried: int,
    gpu_row: Buffer,
    gpu_start: Buffer,
    gpu_end: Buffer,
    api_row: Buffer,
    dur: Buffer,
    big: int,
) -> Buffer | None: ...
