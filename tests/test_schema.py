"""The dataset's tables declared once (nvbridge.dataset.schema): docs/dataset.md, the tests'
contract and every file a conversion writes hold to the declaration."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import nvbridge
from nvbridge.dataset import schema
from tests.conftest import SAMPLE_DB, real_db
from tests.test_dataset import ADDED, CONTRACT

DOCS = Path(__file__).resolve().parent.parent / "docs" / "dataset.md"
# docs/dataset.md's type words, nullable or not (a trailing ?).
DOC_TYPES = {
    "int64": pa.int64(),
    "string": pa.string(),
    "bool": pa.bool_(),
    "double": pa.float64(),
    "list<string>": pa.list_(pa.string()),
}


def _sections() -> dict[str, str]:
    """docs/dataset.md's text under each ``## table...`` heading."""
    parts = re.split(r"^## ", DOCS.read_text(), flags=re.M)
    return {part.split(":", 1)[0].split(",", 1)[0].strip(): part for part in parts[1:]}


def _names(cell: str) -> list[str]:
    """The columns one table cell names: `a`, `b` and `grid_x/y/z` (grid_x, grid_y, grid_z)."""
    found = []
    for name in re.findall(r"`([a-z_/]+)`", cell):
        stem, *more = name.split("/")
        found.append(stem)
        found += [stem[: -len(m)] + m for m in more]
    return found


def _doc_rows(table: str) -> dict[str, tuple[str, bool]]:
    """Each column docs/dataset.md's table of ``table`` lists: (type word, marked *contract*)."""
    rows: dict[str, tuple[str, bool]] = {}
    for line in _sections()[table].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].startswith("`"):
            for name in _names(cells[0]):
                rows[name] = (cells[1].rstrip("?"), "*contract*" in cells[2])
    return rows


@pytest.mark.parametrize("table", ["ops", "gpu_ops", "collectives", "nccl_payloads"])
def test_the_docs_list_every_declared_column_with_its_type(table: str) -> None:
    rows = _doc_rows(table)
    declared = schema.SCHEMAS[table]
    assert sorted(rows) == sorted(declared.names)
    for name, (word, _) in rows.items():
        assert schema.same_type(declared.field(name).type, DOC_TYPES[word]), (table, name, word)
    assert sorted(n for n, (_, contract) in rows.items() if contract) == sorted(schema.CONTRACT[table])


def test_the_docs_name_every_column_of_the_small_tables() -> None:
    text = _sections()
    for table in ("api_calls", "marks", "syncs", "threads", "devices"):
        section = text["api_calls"] if table == "api_calls" else text["marks"]
        if table != "api_calls":  # the bullet of that table
            section = next(b for b in section.split("\n- ") if b.startswith(f"`{table}`"))
        named = set(_names(section))
        assert set(schema.SCHEMAS[table].names) <= named, (table, set(schema.SCHEMAS[table].names) - named)
    # "All *contract* but kind, gpu_op_count and return_value."
    api = set(schema.API_CALLS.names) - {"kind", "gpu_op_count", "return_value"}
    assert set(schema.CONTRACT["api_calls"]) == api


def test_the_tests_contract_is_declared() -> None:
    for table, columns in [*CONTRACT.items(), *ADDED.items()]:
        for name, typ in columns.items():
            assert schema.same_type(schema.SCHEMAS[table].field(name).type, typ), (table, name)
        if table in schema.CONTRACT and table != "devices":
            assert set(columns) <= set(schema.SCHEMAS[table].names)


@pytest.mark.parametrize(
    "source",
    ["nsys-2026.2-pytorch2-fsdp-2gpu.sqlite", "nvprof-2020-pytorch14-pyprof-lm.sqlite", "sample:flops_cpu.sqlite"],
)
def test_every_written_file_is_the_declared_table(source: str, tmp_path: Path) -> None:
    path = SAMPLE_DB / source.removeprefix("sample:") if source.startswith("sample:") else real_db(source)
    out = tmp_path / "out"
    nvbridge.convert(path, out)
    for table in schema.TABLES:
        assert schema.mismatches(table, pq.read_schema(out / f"{table}.parquet")) == [], table
    assert pq.read_schema(out / "meta.parquet").names == schema.META.names
    # a report of several ranks also keeps its matched collectives (nvbridge.dataset.collectives)
    several = ["collectives"] if source.startswith("nsys-2026.2-pytorch2-fsdp") else []
    assert sorted(p.stem for p in out.iterdir()) == sorted([*schema.TABLES, "meta", *several])
    for table in several:
        assert schema.mismatches(table, pq.read_schema(out / f"{table}.parquet")) == [], table


def test_a_table_unlike_its_declaration_is_refused() -> None:
    ops = schema.OPS.empty_table()
    assert schema.conform("ops", ops) is ops
    with pytest.raises(AssertionError, match="ops columns"):
        schema.conform("ops", ops.drop_columns(["flags"]))
    with pytest.raises(AssertionError, match=r"ops\.depth is string"):
        schema.conform("ops", ops.set_column(2, "depth", pa.array([], pa.string())))
    with pytest.raises(KeyError, match="no column nope"):
        schema.pick("ops", ["op_id", "nope"])


def test_a_declared_integer_column_of_another_type_is_refused(tmp_path: Path) -> None:
    """The dataset checks take the integer columns from the declarations, not from the names:
    ``seq`` (no ``_id``/``_ns`` in its name) edited into text is refused when it is read."""
    out = tmp_path / "out"
    nvbridge.convert(SAMPLE_DB / "flops_cpu.sqlite", out)
    ops = pq.read_table(out / "ops.parquet")
    seq = ops.schema.get_field_index("seq")
    pq.write_table(ops.set_column(seq, "seq", ops.column("seq").cast(pa.string())), out / "ops.parquet")
    with pytest.raises(nvbridge.errors.DamagedDataset, match="seq of another type than integer"):
        nvbridge.load(out, columns={"ops": ["op_id", "seq"]})
