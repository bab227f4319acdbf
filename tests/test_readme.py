"""The README's examples do what they say, on a dataset the test converts."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import nvbridge
from tests.conftest import SAMPLE_DB

ROOT = Path(__file__).resolve().parents[1]


def _blocks(path: Path, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", path.read_text(), re.M | re.S)


def test_duckdb_example_groups_calls_by_op_name(tmp_path: Path) -> None:
    duckdb = pytest.importorskip("duckdb")
    nvbridge.convert(SAMPLE_DB / "cnn_cpu+synthetic_gpu.sqlite", tmp_path / "out")
    [sql] = [b for b in _blocks(ROOT / "README.md", "sql") if "top ops by GPU time" in b]
    query = sql.split(";")[0].replace("'out/", f"'{tmp_path}/out/")
    rows = duckdb.sql(query).fetchall()
    [names] = duckdb.sql(f"SELECT count(*), count(DISTINCT op_name) FROM '{tmp_path}/out/ops.parquet'").fetchall()
    assert len(rows) == min(10, names[1]) < names[0]
    assert all(", seq =" not in str(name) and ", op_id =" not in str(name) for name, *_ in rows)
    assert all(calls > 1 for _, calls, _ in rows[:3])  # a training loop calls its top ops many times


@pytest.mark.parametrize("doc", ["README.md", "docs/annotate.md"])
def test_emit_nvtx_examples_call_step_at_the_top_of_the_loop(doc: str) -> None:
    """step() closes the previous ProfilerStep range and opens the next: called last in the body,
    the first iteration runs outside any step and every step range holds the next iteration."""
    loops = [
        node
        for block in _blocks(ROOT / doc, "python")
        if "emit_nvtx" in block
        for node in ast.walk(ast.parse(block))
        if isinstance(node, ast.For)
    ]
    assert loops
    for loop in loops:
        first = loop.body[0]
        assert isinstance(first, ast.Expr) and isinstance(first.value, ast.Call), ast.unparse(loop)
        assert isinstance(first.value.func, ast.Attribute) and first.value.func.attr == "step", ast.unparse(loop)
