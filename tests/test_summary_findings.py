"""Issue #14's new-user findings about `nvbridge summary`: each test failed before its fix.

Expected figures come from the raw SQLite rows (sqlite3), never from nvbridge's own output.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import nvbridge
from nvbridge.cli import cli
from nvbridge.errors import NvbridgeError
from tests.conftest import SAMPLE_DB, raw, real_db

LM = "nvprof-2020-pytorch14-pyprof-lm.sqlite"
FSDP = "nsys-2026.2-pytorch2-fsdp-2gpu.sqlite"


def _summary(*args: str) -> Result:
    return CliRunner().invoke(cli, ["summary", *args])


def _one_line_error(result: Result, code: int) -> str:
    """The error line (click's usage lines, if any, come first); no traceback."""
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output and "internal error" not in result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.stderr
    return errors[0]


def test_bad_filter_regex_names_filter_not_sort() -> None:  # finding 1
    line = _one_line_error(_summary(str(real_db(LM)), "--filter", "aten::(mm"), 2)
    assert "--filter" in line and "--sort" not in line and "aten::(mm" in line


def test_unknown_device_lists_the_devices() -> None:  # finding 7
    kernels = raw(real_db(FSDP), "SELECT DISTINCT deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL")
    gpus = sorted(int(str(d)) for (d,) in kernels)
    assert gpus == [0, 1]
    line = _one_line_error(_summary(str(real_db(FSDP)), "--device", "5"), 2)
    assert "--device" in line and "GPU 5" in line and "0, 1" in line
    line = _one_line_error(_summary(str(SAMPLE_DB / "cnn_cpu.sqlite"), "--device", "0"), 2)
    assert "no GPU ops" in line


def test_bare_min_time_is_microseconds_and_documented() -> None:  # finding 11
    path = str(real_db(LM))
    bare = json.loads(_summary(path, "--min-time", "1000", "--json").stdout)["rows"]
    unit = json.loads(_summary(path, "--min-time", "1ms", "--json").stdout)["rows"]
    assert bare == unit and 0 < len(unit)
    help_text = " ".join(_summary("--help").stdout.split())
    assert "a bare number is microseconds" in help_text
    docs = (Path(__file__).parent.parent / "docs" / "cli.md").read_text()
    assert "a bare number is microseconds" in docs


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--csv", "--json"], "--csv"),
        (["--limit", "-5"], "--limit"),
        (["--stack-depth", "2"], "--stack-depth"),
        (["--stack-depth", "0", "--group-by", "stack"], "--stack-depth"),
    ],
)
def test_conflicting_or_meaningless_options_are_refused(flags: list[str], named: str) -> None:  # finding 12
    line = _one_line_error(_summary(str(real_db(LM)), *flags), 2)
    assert named in line


def test_no_nvtx_says_so() -> None:  # finding 13
    path = real_db("nsys-2023.3-openmp-offload.sqlite")
    assert raw(path, "SELECT count(*) FROM sqlite_master WHERE name = 'NVTX_EVENTS'") == [(0,)]
    result = _summary(str(path))
    assert result.exit_code == 0, result.output
    assert "no NVTX ranges" in result.stderr


def test_ranges_open_at_the_end_get_a_notice() -> None:  # finding 13
    path = real_db("nsys-2024.2-pyprof-markers.sqlite")
    # This exporter stores the capture end (ANALYSIS_DETAILS.duration) as a never-closed range's end.
    unended = raw(
        path,
        "SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60) AND (end IS NULL "
        "OR end = (SELECT duration FROM ANALYSIS_DETAILS))",
    )[0][0]
    assert isinstance(unended, int) and unended > 0
    result = _summary(str(path))
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if "open at the capture end" in line]
    assert len(notes) == 1 and f"{unended:,} ranges" in notes[0]


@pytest.mark.parametrize(
    "name, tables",
    [
        (LM, ("CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")),
        (FSDP, ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")),
        ("nsys-2023.3-openmp-offload.sqlite", ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY")),
    ],
)
def test_self_cuda_sums_to_all_gpu_time_with_a_no_op_row(name: str, tables: tuple[str, ...]) -> None:  # finding 13
    path = real_db(name)
    gpu_ns = sum(int(str(raw(path, f"SELECT coalesce(sum(end - start), 0) FROM {t}")[0][0])) for t in tables)
    data = json.loads(_summary(str(path), "--json", "--limit", "-1").stdout)
    assert sum(r["self_gpu_ns"] for r in data["rows"]) == gpu_ns > 0
    text = _summary(str(path), "--limit", "-1").stdout
    assert "[no op]" in text or all(r["name"] != "[no op]" for r in data["rows"])


def test_cpu_only_report_sorts_by_cpu_time() -> None:  # finding 14
    result = _summary(str(SAMPLE_DB / "cnn_cpu.sqlite"), "--json", "--limit", "-1")
    rows = json.loads(result.stdout)["rows"]
    self_cpu = [r["self_cpu_ns"] for r in rows]
    assert self_cpu == sorted(self_cpu, reverse=True) and self_cpu[0] > self_cpu[-1]
    assert all(r["self_gpu_ns"] == 0 for r in rows)
    assert "sorted by self CPU time" in _summary(str(SAMPLE_DB / "cnn_cpu.sqlite")).stderr


def test_df_without_pandas_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:  # finding 15
    report = nvbridge.load(SAMPLE_DB / "cnn_cpu.sqlite")
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(NvbridgeError, match=r"pip install pandas"):
        report.df("ops")


def test_load_nvprof_without_torch_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:  # finding 15
    for name in ["torch", *[m for m in sys.modules if m.startswith("torch.")]]:
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(NvbridgeError, match=r"pip install torch"):
        nvbridge.load_nvprof(real_db(LM))


def test_table_takes_torchs_arguments() -> None:  # finding 15
    averages = nvbridge.load(real_db(LM)).key_averages()
    text = averages.table(
        sort_by="self_cpu_time_total",
        row_limit=5,
        max_name_column_width=12,
        max_src_column_width=75,
        max_shapes_column_width=80,
        header="LM",
        time_unit="ms",
        top_level_events_only=False,
    )
    lines = text.splitlines()
    assert lines[0] == "LM" and len(lines[5].split("  ")[0]) <= 12


def test_rank_lines_read_naturally(tmp_path: Path) -> None:  # finding 16
    out = tmp_path / "ds"
    nvbridge.convert([SAMPLE_DB / "cnn_cpu.sqlite", SAMPLE_DB / "threads_cpu.sqlite"], out)
    text = _summary(str(out)).stdout
    assert "cnn_cpu.sqlite (cnn_cpu.sqlite)" not in text
    assert "2 reports:" in text
    assert [line for line in text.splitlines() if line.startswith("  cnn_cpu.sqlite: ")]


def test_counts_are_singular_or_plural() -> None:  # finding 16
    from nvbridge.analysis import plural

    assert [plural(n, "kernel") for n in (0, 1, 2, 1234)] == ["0 kernels", "1 kernel", "2 kernels", "1,234 kernels"]
    assert plural(1, "GPU op") == "1 GPU op" and plural(1, "host thread") == "1 host thread"
