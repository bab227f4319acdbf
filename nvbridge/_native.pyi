"""Types of nvbridge._native (nvbridge/_native/*.c), the optional compiled loops."""

from typing import Any

Buffer = Any

class Unreadable(Exception): ...

class Reader:
    """A read-only SQLite connection for one thread."""

    def __init__(self, uri: str, mmap_bytes: int = 0) -> None: ...
    def read(self, sql: str, kinds: str, capacity: int = 65536) -> list[tuple[object, ...]]: ...
    def chunk_spans(self, sql: str, first: int, size: int, n: int) -> Buffer | None: ...
    def close(self) -> None: ...

def split_names(offsets: Buffer, data: Buffer, first: int, n: int) -> tuple[Buffer, Buffer, Buffer, Buffer]: ...
def build_tree(
    thread: Buffer, start: Buffer, end: Buffer, cross: Buffer, api_thread: Buffer, api_start: Buffer, api_end: Buffer
) -> tuple[Buffer, Buffer, Buffer, Buffer]: ...
def duplicates(*columns: Buffer) -> int: ...

class Store:
    """The latest forward op per key, five int64 values each."""

    def put(self, keys: Buffer, seq: Buffer, values: Buffer) -> None: ...
    def get(self, keys: Buffer, seq: Buffer) -> Buffer: ...
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
) -> Buffer: ...
