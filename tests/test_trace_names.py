"""CUDA API calls in the trace are named as torch.profiler (Kineto) names them: a runtime call's
CUPTI callback-id suffix (``_v`` and the CUDA version that added the entry point) dropped, the
report's name kept in ``args["cbid name"]``; driver calls as the report names them. The expected
names are read from each export with Python's sqlite3 (StringIds, eventClass 1 = driver)."""

from __future__ import annotations

import re
import sqlite3
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

import nvbridge
from nvbridge.conversion.memory import export_chrome_trace
from nvbridge.export.chrome_names import api_names
from tests.conftest import ALL_FILES, NSYS_FILES, SAMPLE_DB, real_db
from tests.test_chrome import load_strict

API_CATS = ("cuda_runtime", "cuda_driver")
NSYS_SAMPLES = [p.name for p in sorted(SAMPLE_DB.glob("*_gpu.sqlite"))]  # the recordings with CUDA calls


def kineto(name: str) -> str:
    """Kineto's name for a runtime callback: CUPTI_RUNTIME_TRACE_CBID_<name>_v<CUDA version>
    without the version (libkineto's runtimeCbidNames: cudaLaunchKernel, cudaLaunchKernel_ptsz,
    cudaStreamGetCaptureInfo_v2)."""
    return re.sub(r"_v\d{4,}$", "", name)


def _trace_names(path: Path, tmp: Path) -> Counter[tuple[str, str, str | None]]:
    out = tmp / "t.json"
    export_chrome_trace(path, out)
    events = load_strict(out)["traceEvents"]
    return Counter((e["cat"], e["name"], e["args"].get("cbid name")) for e in events if e.get("cat") in API_CATS)


@pytest.mark.parametrize("name", [*NSYS_FILES, *(f"sample:{n}" for n in NSYS_SAMPLES)])
def test_nsys_api_names_are_kinetos(name: str, tmp_path: Path) -> None:
    path = SAMPLE_DB / name.split(":", 1)[1] if name.startswith("sample:") else real_db(name)
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        rows = (
            con.execute(
                "SELECT r.eventClass, s.value FROM CUPTI_ACTIVITY_KIND_RUNTIME AS r "
                "JOIN StringIds AS s ON s.id = r.nameId"
            ).fetchall()
            if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables
            else []
        )
    finally:
        con.close()
    want: Counter[tuple[str, str, str | None]] = Counter()
    for cls, raw in rows:
        if cls == 1:
            want[("cuda_driver", raw, None)] += 1
        else:
            want[("cuda_runtime", kineto(raw), raw if kineto(raw) != raw else None)] += 1
    assert want
    assert _trace_names(path, tmp_path) == want


@pytest.mark.parametrize("name", [n for n in ALL_FILES if n.startswith("nvprof") and "empty" not in n])
def test_nvprof_api_names_come_through(name: str, tmp_path: Path) -> None:
    """nvprof's calls are named from their callback ids, already without a version: unchanged."""
    path = real_db(name)
    report = nvbridge.load(path)
    want = Counter(
        ("cuda_driver" if k == "driver" else "cuda_runtime", n, None)
        for k, n in zip(report.api_calls.column("kind").to_pylist(), report.api_calls.column("name").to_pylist())
    )
    assert _trace_names(path, tmp_path) == want


def test_the_suffix_rule_on_the_names_kineto_lists() -> None:
    names = [
        "cudaLaunchKernel_v7000",
        "cudaLaunchKernel_ptsz_v7000",
        "cudaGetDeviceProperties_v2_v12000",
        "cudaStreamGetCaptureInfo_v2_v11030",
        "cudaLaunchKernelExC_v11060",
        "cuMemcpyHtoDAsync_v2",
        "cuGetProcAddress_v2",
        "cuLaunchKernelEx",
        None,
        "cudaMemcpyAsync",
    ]
    kinds = ["runtime", "runtime", "runtime", "runtime", "runtime", "driver", "driver", "driver", "runtime", "other"]
    for values in (pa.array(names), pa.array(names).dictionary_encode()):
        shown, versioned = api_names(values, pa.array(kinds))
        assert versioned is not None
        assert shown.cast(pa.string()).to_pylist() == [
            "cudaLaunchKernel",
            "cudaLaunchKernel_ptsz",
            "cudaGetDeviceProperties_v2",
            "cudaStreamGetCaptureInfo_v2",
            "cudaLaunchKernelExC",
            "cuMemcpyHtoDAsync_v2",
            "cuGetProcAddress_v2",
            "cuLaunchKernelEx",
            None,
            "cudaMemcpyAsync",
        ]
        assert versioned.cast(pa.string()).to_pylist() == [*names[:5], None, None, None, None, None]
    # a driver call named like a runtime callback keeps its name
    shown, versioned = api_names(pa.array(["cuFoo_v12000"]), pa.array(["driver"]))
    assert shown.cast(pa.string()).to_pylist() == ["cuFoo_v12000"]
    assert versioned is not None and versioned.to_pylist() == [None]
    assert api_names(pa.array(["cudaFree", "cuInit"]), pa.array(["runtime", "driver"]))[1] is None
