"""No output holds a capture's secrets (issue 24, item 1).

A real export carries the capturing machine's environment (``KEY=VALUE`` rows, tokens among
them), its host name, install paths and PATH: in ``META_DATA_CAPTURE``
(``PROCESS_n:ENVIRONMENT_VARIABLE``), ``TARGET_INFO_SYSTEM_ENV`` (``DeviceEnvironment``) and in
``StringIds`` entries no row refers to. Before dictionaries were compacted, the Parquet
dictionaries of ``api_calls.name`` and ``gpu_ops.name/short_name/mangled_name`` held the whole
``StringIds`` table.

Every real export and sample gets such secrets planted in a temporary copy, the way real exports
hold them (marker strings no output can hold by chance). Everything a conversion and the
commands over it write is then scanned: each Parquet file row group by row group with every text
column read through its dictionary pages (``read_dictionary``: what a reader of the file sees,
not only the values rows use), the traces decompressed, the JSON of ``summary``, ``advise`` and
``diff``, and the tables ``nvbridge.load`` returns. No planted marker may appear, nor any
``StringIds``/``StringTable`` entry of the input that no row of a table nvbridge reads refers to
(that set computed by raw SQL on the input).
"""

from __future__ import annotations

import gzip
import json
import secrets
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import nvbridge
from nvbridge.cli import cli
from nvbridge.dataset.dictionaries import compact_table
from tests.conftest import ALL_FILES, SAMPLE_DB, real_db

BASES = [f"real/{name}" for name in ALL_FILES] + [f"sample/{p.name}" for p in sorted(SAMPLE_DB.glob("*.sqlite"))]
K = "CUPTI_ACTIVITY_KIND_"
# The string-id columns of the tables nvbridge reads: an entry none of them names is read by nothing.
NSYS_REFS = {
    "NVTX_EVENTS": ["textId"],
    K + "RUNTIME": ["nameId"],
    K + "KERNEL": ["demangledName", "shortName", "mangledName"],
    "ThreadNames": ["nameId"],
}
NVPROF_REFS = {
    K + "MARKER": ["name", "domain"],
    K + "KERNEL": ["name"],
    K + "CONCURRENT_KERNEL": ["name"],
    K + "NAME": ["name"],
    K + "DEVICE": ["name"],
}


def _source(base: str) -> Path:
    kind, name = base.split("/", 1)
    return real_db(name) if kind == "real" else SAMPLE_DB / name


def _columns(con: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in con.execute(f'PRAGMA table_info("{table}")')}


def plant(path: Path) -> list[str]:
    """Secrets written into ``path`` where real exports hold them; returns the marker strings."""
    tag = secrets.token_hex(6)
    markers = [f"nvbleak{k}{tag}" for k in range(7)]
    con = sqlite3.connect(path)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        unreferenced = [
            f"NVB_TOKEN={markers[0]}",
            f"{markers[1]}.cluster.example.com",
            f"/home/{markers[2]}/.local/bin",
        ]
        if "StringIds" in tables:
            top = con.execute("SELECT coalesce(max(id), 0) FROM StringIds").fetchone()[0]
            con.executemany(
                "INSERT INTO StringIds (id, value) VALUES (?, ?)",
                [(top + 1000 + k, text) for k, text in enumerate(unreferenced)],
            )
            if "META_DATA_CAPTURE" not in tables:
                con.execute("CREATE TABLE META_DATA_CAPTURE (name TEXT NOT NULL, value TEXT)")
            con.executemany(
                "INSERT INTO META_DATA_CAPTURE (name, value) VALUES (?, ?)",
                [
                    ("PROCESS_0:ENVIRONMENT_VARIABLE", f"AWS_SECRET_ACCESS_KEY={markers[3]}"),
                    ("PROCESS_1:ENVIRONMENT_VARIABLE", f"PATH=/opt/{markers[4]}/bin:/usr/bin"),
                ],
            )
            if "TARGET_INFO_SYSTEM_ENV" not in tables:
                con.execute(
                    "CREATE TABLE TARGET_INFO_SYSTEM_ENV (globalVid INTEGER, devStateName TEXT NOT NULL, "
                    "name TEXT NOT NULL, nameEnum INTEGER NOT NULL, value TEXT NOT NULL)"
                )
            con.execute(
                "INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES (1 << 48, 'Local (CLI)', 'DeviceEnvironment', 32, ?)",
                (f"HOSTNAME={markers[5]}\nHF_TOKEN=hf_{markers[6]}",),
            )
        else:  # nvprof: its string table is the only place text lives
            con.executemany(
                "INSERT INTO StringTable (value) VALUES (?)",
                [(text,) for text in [*unreferenced, f"HF_TOKEN={markers[3]}", f"HOSTNAME={markers[5]}"]],
            )
            markers = markers[:4] + markers[5:6]
        con.commit()
    finally:
        con.close()
    return markers


# Text nvbridge reads inline (not by id): an unreferenced string-table entry equal to one of
# these reaches the outputs through it, legitimately.
INLINE = {
    "NVTX_EVENTS": "text",
    "DIAGNOSTIC_EVENT": "text",
    "PROCESSES": "name",
    "TARGET_INFO_GPU": "name",
    "TARGET_INFO_CUDA_GPU": "name",
}
# Shorter entries coincide with nvbridge's own words (``pid``, ``tid``, ``kernel``).
SHORTEST = 8


def unreferenced_strings(path: Path) -> set[str]:
    """The string-table entries no column of the tables nvbridge reads refers to, and that no
    text nvbridge reads inline holds (raw SQL)."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        nsys = "StringIds" in tables
        strings, key = ("StringIds", "id") if nsys else ("StringTable", "_id_")
        refs = [
            f'SELECT "{col}" FROM "{table}" WHERE "{col}" IS NOT NULL'  # a NULL in NOT IN matches nothing
            for table, cols in (NSYS_REFS if nsys else NVPROF_REFS).items()
            if table in tables
            for col in cols
            if col in _columns(con, table)
        ]
        where = f"WHERE {key} NOT IN ({' UNION '.join(refs)})" if refs else ""
        hidden = {str(v) for (v,) in con.execute(f"SELECT value FROM {strings} {where}") if v is not None}
        for table, col in INLINE.items():
            if table in tables and col in _columns(con, table):
                hidden -= {str(v) for (v,) in con.execute(f'SELECT DISTINCT "{col}" FROM "{table}"')}
        return {s for s in hidden if len(s) >= SHORTEST}
    finally:
        con.close()


def _parquet_strings(path: Path) -> Iterator[str]:
    """Every string a reader of the file can get: each text column's dictionary pages (read as
    they are stored) and values, row group by row group."""
    schema = pq.read_schema(path)
    text = [f.name for f in schema if _has_text(f.type)]
    pf = pq.ParquetFile(path, read_dictionary=[c for c in text if not pa.types.is_nested(schema.field(c).type)])
    for i in range(pf.metadata.num_row_groups):
        group = pf.read_row_group(i, columns=text)
        for column in group.columns:
            for chunk in column.chunks:
                yield from _array_strings(chunk)
    meta = pf.schema_arrow.metadata or {}
    yield from (v.decode("utf-8", "replace") for v in meta.values())


def _has_text(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        return True
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t):
        return True
    return pa.types.is_list(t) and _has_text(t.value_type)


def _array_strings(arr: pa.Array) -> Iterator[str]:
    if isinstance(arr, pa.DictionaryArray):
        # The dictionary whole: entries no row uses are exactly what leaked.
        yield from (str(v) for v in arr.dictionary.to_pylist() if v is not None)
    elif isinstance(arr, pa.ListArray):
        yield from _array_strings(arr.flatten())
    else:
        yield from (v if isinstance(v, str) else bytes(v).decode("utf-8", "replace") for v in arr.to_pylist() if v)


def _json_strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _json_strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _json_strings(v)


def _file_strings(path: Path) -> Iterator[str]:
    if path.suffix == ".parquet":
        yield from _parquet_strings(path)
        yield path.read_bytes().decode("latin-1")  # footers and key/value metadata, uncompressed
    elif path.name.endswith(".gz"):
        text = gzip.decompress(path.read_bytes()).decode()
        yield text
        yield from _json_strings(json.loads(text))
    else:
        text = path.read_text()
        yield text
        yield from _json_strings(json.loads(text))


def _table_strings(report: nvbridge.Report) -> Iterator[str]:
    for name in ("ops", "gpu_ops", "api_calls", "marks", "syncs", "threads", "devices"):
        for column in report.table(name).columns:
            for chunk in column.chunks:
                if _has_text(chunk.type):
                    yield from _array_strings(chunk)
    yield from (str(v) for v in report.meta.values() if v is not None)


def _run(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def outputs(db: Path, work: Path) -> list[tuple[str, list[str]]]:
    """(where, strings) for everything a conversion and the commands over it write."""
    work.mkdir()
    ds, chrome, trace = work / "ds", work / "convert.json.gz", work / "trace.json"
    # A capture with nothing in it has no trace (refused, as documented, and nothing written).
    result = CliRunner().invoke(cli, ["convert", str(db), "-o", str(ds), "--chrome", str(chrome), "-q"])
    empty = result.exit_code == 1 and "nothing to trace" in result.output
    assert result.exit_code == 0 or empty, result.output
    if empty:
        _run("convert", str(db), "-o", str(ds), "-q")
    out = [(str(p.relative_to(work)), list(_file_strings(p))) for p in sorted(ds.rglob("*")) if p.is_file()]
    if not empty:  # from the report itself: the tables of a conversion in memory (load(report))
        _run("trace", str(db), "-o", str(trace))
    out += [(p.name, list(_file_strings(p))) for p in (chrome, trace) if p.exists()]
    for args in (["summary", str(ds), "--json"], ["advise", str(ds), "--json"], ["diff", str(db), str(ds), "--json"]):
        text = _run(*args)
        out.append((args[0], [text, *_json_strings(json.loads(text))]))
    out.append(("load(report)", list(_table_strings(nvbridge.load(db)))))
    out.append(("load(dataset)", list(_table_strings(nvbridge.load(ds)))))
    return out


@pytest.mark.parametrize("base", BASES)
def test_no_output_holds_an_environment_or_an_unreferenced_string(base: str, tmp_path: Path) -> None:
    src = _source(base)
    db = tmp_path / "in" / src.name
    db.parent.mkdir()
    shutil.copyfile(src, db)
    markers = plant(db)
    hidden = unreferenced_strings(db)
    assert any(m in s for m in markers for s in hidden), "the planted StringIds entries must be unreferenced"
    found = []
    for where, strings in outputs(db, tmp_path / "out"):
        found += [f"{where}: {m}" for m in markers if any(m in s for s in strings)]
        found += [f"{where}: unreferenced {s[:60]!r}" for s in sorted(hidden & set(strings))]
    assert not found, "\n".join(found[:20])


def test_compacted_chunks_share_one_dictionary_of_the_used_values() -> None:
    """Chunks with different dictionaries (windows of a conversion) come out with one shared
    dictionary of just the used values (so Parquet keeps dictionary encoding in a row group),
    and the same values row by row, nulls included."""
    strings = pa.array(["a", "b", "SECRET=1", "c", "d"])
    first = pa.DictionaryArray.from_arrays(pa.array([0, None, 1, 0], pa.int32()), strings)
    second = pa.DictionaryArray.from_arrays(pa.array([1, 0], pa.int32()), pa.array(["x", "c"]))
    column = pa.chunked_array([first, second])
    out = compact_table(pa.table({"name": column})).column("name")
    assert out.to_pylist() == column.to_pylist() == ["a", None, "b", "a", "c", "x"]
    assert len({tuple(c.dictionary.to_pylist()) for c in out.chunks}) == 1
    assert sorted(out.chunks[0].dictionary.to_pylist()) == ["a", "b", "c", "x"]
    nothing = pa.DictionaryArray.from_arrays(pa.nulls(3, pa.int32()), strings)
    assert compact_table(pa.table({"name": nothing})).column("name").chunks[0].dictionary.to_pylist() == []


def test_the_scan_sees_a_dictionary_entry_no_row_uses(tmp_path: Path) -> None:
    """The scan reads dictionary pages, not only the values rows use: a Parquet file whose
    dictionary holds an extra entry is caught (what every dataset held before compaction)."""
    extra = f"NVB_TOKEN=nvbleak{secrets.token_hex(6)}"
    names = pa.DictionaryArray.from_arrays(pa.array([0, 0], pa.int32()), pa.array(["aten::mm", extra]))
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"name": names}), path)
    assert any(extra in s for s in _parquet_strings(path))
    assert extra not in pq.read_table(path).column("name").to_pylist()
