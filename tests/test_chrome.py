"""The Chrome/Perfetto trace: strictly valid JSON that viewers and PyTorch-trace tools accept.

Every trace written from the real exports and the recordings is parsed with a strict JSON
parser and checked the way Perfetto and chrome://tracing read it: flows pair up and bind to a
slice on their track, slices nest per track, track ids fit Perfetto's unsigned 32 bits, and the
counts and GPU time per device equal the dataset's tables and the raw SQL.
"""

from __future__ import annotations

import gzip
import json
import sqlite3
import warnings
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc
import pytest

import nvbridge
from nvbridge.columns import np_col
from nvbridge.conversion.memory import export_chrome_trace, export_chrome_traces
from nvbridge.errors import ExportError
from nvbridge.export import chrome
from tests import tiny_nsys
from tests.conftest import ALL_FILES, SAMPLE_DB, raw, real_db

SAMPLES = sorted(p.name for p in SAMPLE_DB.glob("*.sqlite"))
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
KIND_OF_CAT = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
FSDP = "nsys-2026.2-pytorch2-fsdp-2gpu.sqlite"
LM = "nvprof-2020-pytorch14-pyprof-lm.sqlite"


def _reject_constant(name: str) -> None:
    raise ValueError(f"non-standard JSON constant {name}")


def load_strict(path: Path) -> dict[str, Any]:
    """Parse like the strictest consumer: UTF-8 only, no NaN/Infinity, no duplicate keys."""
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    text = data.decode("utf-8")  # raises on invalid UTF-8

    def no_dupes(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in pairs]
        assert len(keys) == len(set(keys)), f"duplicate keys {keys}"
        return dict(pairs)

    doc = json.loads(text, parse_constant=_reject_constant, object_pairs_hook=no_dupes)
    assert isinstance(doc, dict)
    return doc


def ns(x: float) -> int:
    """Trace times are µs with three decimals: back to integer ns, exactly."""
    return round(x * 1000)


def validate(doc: dict[str, Any]) -> dict[str, Any]:
    """Check the structural rules; return per-kind counts and GPU ns per device."""
    assert isinstance(doc["baseTimeNanoseconds"], int)
    assert doc["schemaVersion"] == 1
    info = doc["distributedInfo"]  # one rank's file, or (several ranks in one file) a rank per process, no rank
    # a file of some ranks of many (nvbridge trace --ranks) holds ranks of the world, each process one
    assert (
        info["rank"] >= 0 if "rank" in info else set(info["rank_of_process"].values()) <= {*range(info["world_size"])}
    )
    events = doc["traceEvents"]
    slices: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    cats: Counter[str] = Counter()
    gpu_ns: Counter[int] = Counter()
    named_threads: set[tuple[int, int]] = set()
    named_procs: set[int] = set()
    counter_pids: set[int] = set()
    flows: dict[tuple[str, int], dict[str, list[dict[str, Any]]]] = defaultdict(lambda: {"s": [], "f": []})
    for e in events:
        ph = e["ph"]
        if ph in ("X", "s", "f", "M"):
            for key in ("pid", "tid"):
                if key in e:  # Perfetto drops ids outside uint32 and merges their tracks
                    assert isinstance(e[key], int) and 0 <= e[key] < 2**32, e
        if ph == "X":
            start, dur = ns(e["ts"]), ns(e["dur"])
            assert dur >= 0 and start >= 0, e
            assert isinstance(e["name"], str)
            slices[(e["pid"], e["tid"])].append((start, start + dur))
            cats[e["cat"]] += 1
            if e["cat"] in GPU_CATS:
                gpu_ns[e["args"]["device"]] += dur
        elif ph in ("s", "f"):
            flows[(e["cat"], e["id"])][ph].append(e)
        elif ph == "C":  # a counter: one track per process, name and arg key; every value a number
            assert isinstance(e["pid"], int) and 0 <= e["pid"] < 2**32, e
            assert isinstance(e["name"], str) and ns(e["ts"]) >= 0 and "tid" not in e, e
            assert e["args"] and all(type(v) in (int, float) for v in e["args"].values()), e
            counter_pids.add(e["pid"])
            cats["counter " + e["cat"]] += 1
        elif ph == "M":
            if e["name"] == "thread_name":
                named_threads.add((e["pid"], e["tid"]))
            elif e["name"] == "process_name":
                named_procs.add(e["pid"])
        else:
            raise AssertionError(f"unexpected phase {ph}")

    assert counter_pids <= named_procs, f"counters of unnamed processes {counter_pids - named_procs}"
    counters = cats.pop("counter memory", 0)
    assert not any(c.startswith("counter ") for c in cats), cats  # the one category of counters
    # Slices nest per track: sorted by (start, -end), each lies in the innermost open one or after it.
    for track, spans in slices.items():
        assert track in named_threads, f"track {track} has no thread_name"
        assert track[0] in named_procs, f"process {track[0]} has no process_name"
        spans.sort(key=lambda s: (s[0], -s[1]))
        stack: list[int] = []
        for start, end in spans:
            while stack and stack[-1] <= start:
                stack.pop()
            assert not stack or end <= stack[-1], f"slice [{start}, {end}] crosses one ending at {stack[-1]} on {track}"
            stack.append(end)

    # Flows: one start and one end per (cat, id); ids unique across categories; both ends bound.
    ids: dict[int, str] = {}
    flow_counts: Counter[str] = Counter()
    for (cat, fid), pair in flows.items():
        assert len(pair["s"]) == 1 and len(pair["f"]) == 1, (cat, fid, pair)
        assert ids.setdefault(fid, cat) == cat, f"flow id {fid} used by {cat} and {ids[fid]}"
        flow_counts[cat] += 1
        s, f = pair["s"][0], pair["f"][0]
        assert f["bp"] == "e" and s["name"] == f["name"] == cat
        assert ns(s["ts"]) <= ns(f["ts"]) or cat == "fwdbwd"
        for e in (s, f):
            track, t = (e["pid"], e["tid"]), ns(e["ts"])
            assert any(a <= t <= b for a, b in slices.get(track, [])), f"flow {cat} {fid} not on a slice: {e}"
    return {"cats": cats, "gpu_ns": gpu_ns, "flows": flow_counts, "counters": counters}


def expected(report: nvbridge.Report) -> dict[str, Any]:
    ops = report.ops
    torch_op = pc.or_(pc.is_valid(ops.column("seq")), pc.is_valid(ops.column("torch_op_id")))
    n_torch = int(pc.sum(torch_op.cast("int64")).as_py() or 0)
    cats: Counter[str] = Counter({"cpu_op": n_torch, "user_annotation": ops.num_rows - n_torch})
    kinds = report.api_calls.column("kind").cast("string").to_pylist()
    cats["cuda_driver"] = kinds.count("driver")
    cats["cuda_runtime"] = len(kinds) - cats["cuda_driver"]
    gpu = report.gpu_ops
    gkind = np.asarray(gpu.column("kind").cast("string").to_numpy(zero_copy_only=False))
    for cat, kind in KIND_OF_CAT.items():
        cats[cat] = int(((gkind == kind) | ((gkind == "graph") & (kind == "kernel"))).sum())
    dur = np_col(gpu, "end_ns") - np_col(gpu, "start_ns")
    dev = np_col(gpu, "device_id", fill=0)
    gpu_ns = Counter({int(d): int(dur[dev == d].sum()) for d in np.unique(dev)})
    return {"cats": +cats, "gpu_ns": gpu_ns}


def _raw_kernels(path: Path) -> dict[int, tuple[int, int]]:
    """(count, summed ns) of kernels per device straight from the database."""
    tables = {r[0] for r in raw(path, "SELECT name FROM sqlite_master WHERE type='table'")}
    parts = [
        f'SELECT deviceId AS d, "end" - start AS dur FROM {t}'
        for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL")
        if t in tables
    ]
    rows = raw(path, f"SELECT d, count(*), sum(dur) FROM ({' UNION ALL '.join(parts)}) GROUP BY d")
    return {int(d): (int(n), int(s)) for d, n, s in rows}


@pytest.fixture(params=[*ALL_FILES, *(f"sample:{s}" for s in SAMPLES)])
def source(request: pytest.FixtureRequest) -> Path:
    name: str = request.param
    return SAMPLE_DB / name.split(":", 1)[1] if name.startswith("sample:") else real_db(name)


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_every_report_writes_a_valid_trace(source: Path, suffix: str, tmp_path: Path) -> None:
    report = nvbridge.load(source)
    out = tmp_path / f"trace{suffix}"
    if not (report.ops.num_rows or report.api_calls.num_rows or report.gpu_ops.num_rows):
        with pytest.raises(ExportError, match="nothing to trace"):  # an empty capture: say so, write nothing
            export_chrome_trace(report, out)
        assert list(tmp_path.iterdir()) == []
        return
    stats = export_chrome_trace(report, out)
    got = validate(load_strict(out))
    want = expected(report)
    assert got["cats"] == want["cats"]
    assert got["gpu_ns"] == want["gpu_ns"]
    assert got["gpu_ns"] == Counter(stats.gpu_ns_by_device)
    assert dict(got["flows"]) == {k: v for k, v in stats.flows.items() if v}
    # one memory counter per allocator event (none of these reports has one before its first range)
    assert got["counters"] == stats.counters == report.memory.num_rows
    # ac2g: every GPU op with a launching call in the capture gets one flow.
    assert got["flows"]["ac2g"] == int(
        pc.sum(pc.is_valid(report.gpu_ops.column("api_call_id")).cast("int64")).as_py() or 0
    )
    if source.parent != SAMPLE_DB:
        kernels = _raw_kernels(source)
        kind = report.gpu_ops.column("kind").cast("string")
        dev = np_col(report.gpu_ops, "device_id", fill=0)[np.asarray(pc.equal(kind, "kernel"))]
        assert {int(d): int((dev == d).sum()) for d in np.unique(dev)} == {d: n for d, (n, _) in kernels.items()}


def test_samples_have_backward_flows(tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    export_chrome_trace(SAMPLE_DB / "cnn_cpu.sqlite", out)
    assert validate(load_strict(out))["flows"]["fwdbwd"] > 0


def test_gpu_time_per_device_equals_raw_sql(tmp_path: Path) -> None:
    path = real_db(FSDP)
    out = tmp_path / "t.json.gz"
    export_chrome_trace(path, out)
    got = validate(load_strict(out))
    gpu_ops = nvbridge.load(path).gpu_ops
    dev = np_col(gpu_ops, "device_id", fill=0)
    kernel = np.asarray(pc.equal(gpu_ops.column("kind").cast("string"), "kernel"))
    dur = np_col(gpu_ops, "end_ns") - np_col(gpu_ops, "start_ns")
    assert {int(d): int(dur[kernel & (dev == d)].sum()) for d in np.unique(dev)} == {
        d: s for d, (_, s) in _raw_kernels(path).items()
    }
    assert sorted(got["gpu_ns"]) == [0, 1]


def _events_in(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in doc["traceEvents"] if e["ph"] == "X"]


def _epoch(report: nvbridge.Report) -> int:
    session = report.meta.get("time_base") == "session"
    return int(report.meta.get("session_start_utc_ns") or 0) if session else 0


def test_time_window_keeps_overlapping_events_only(tmp_path: Path) -> None:
    path = real_db(FSDP)
    report = nvbridge.load(path)
    full = tmp_path / "full.json"
    export_chrome_trace(report, full)
    full_doc = load_strict(full)
    base = full_doc["baseTimeNanoseconds"] - _epoch(report)  # report time of ts 0
    spans = [(base + ns(e["ts"]), base + ns(e["ts"]) + ns(e["dur"])) for e in _events_in(full_doc)]
    starts = sorted(s for s, _ in spans)
    lo, hi = starts[len(starts) // 3], starts[2 * len(starts) // 3]
    cut = tmp_path / "cut.json.gz"
    export_chrome_trace(report, cut, start_ns=lo, end_ns=hi)
    doc = load_strict(cut)
    validate(doc)
    cut_base = doc["baseTimeNanoseconds"] - _epoch(report)
    kept = _events_in(doc)
    assert 0 < len(kept) < len(spans)
    for e in kept:
        start = cut_base + ns(e["ts"])
        assert start <= hi and start + ns(e["dur"]) >= lo, e
    assert len(kept) == sum(1 for s, e in spans if s <= hi and e >= lo)


def test_steps_window_on_a_recording(tmp_path: Path) -> None:
    path = SAMPLE_DB / "cnn_cpu.sqlite"
    report = nvbridge.load(path)
    first, last = chrome.step_window(report.ops, 1, 1)
    out = tmp_path / "s.json"
    export_chrome_trace(report, out, steps=(1, 1))
    doc = load_strict(out)
    validate(doc)
    names = [e["name"] for e in _events_in(doc)]
    assert "ProfilerStep#1" in names and "ProfilerStep#0" not in names
    start, end = np_col(report.ops, "start_ns"), np_col(report.ops, "end_ns")
    assert len(names) == int(((end >= first) & (start <= last)).sum())
    with pytest.raises(ExportError, match="steps"):
        export_chrome_trace(report, tmp_path / "x.json", steps=(7, 9))


def test_process_filter_on_the_two_process_report(tmp_path: Path) -> None:
    path = real_db(FSDP)
    report = nvbridge.load(path)
    pids = sorted(set(np_col(report.api_calls, "process_id").tolist()))
    assert len(pids) == 2
    seen_devices = []
    for rank, pid in enumerate(pids):
        out = tmp_path / f"rank{rank}.json"
        export_chrome_trace(report, out, processes={pid})
        doc = load_strict(out)
        got = validate(doc)
        host_pids = {e["pid"] for e in _events_in(doc) if e["cat"] not in GPU_CATS}
        assert host_pids == {pid}
        gpu = report.gpu_ops
        mine = np_col(gpu, "process_id", fill=-1) == pid
        dur = (np_col(gpu, "end_ns") - np_col(gpu, "start_ns"))[mine]
        dev = np_col(gpu, "device_id", fill=0)[mine]
        assert got["gpu_ns"] == Counter({int(d): int(dur[dev == d].sum()) for d in np.unique(dev)})
        seen_devices.append(set(got["gpu_ns"]))
    assert seen_devices[0] != seen_devices[1]


# --- names that break naive writers -------------------------------------------------------

NASTY = [
    'quote " backslash \\ tab \t newline \n nul \x00 bell \x07 del \x7f',
    "unicode µs ✓ \u2028 \U0001f600",
    "</script>{}[],:",
]
BAD_UTF8 = b"bad \xff\xfe utf8 \xc3("


def _synthetic(path: Path) -> None:
    """A tiny nsys-shaped export: one thread, NVTX ranges, runtime calls and kernels."""
    con = sqlite3.connect(path)
    con.executescript(tiny_nsys.DDL)
    pid, tid = 4242, 4243
    gtid = (pid << 24) | tid
    gpid = pid << 24
    strings = [(1, "cudaLaunchKernel_v7000"), *((10 + i, n) for i, n in enumerate(NASTY))]
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", strings)
    con.execute("INSERT INTO StringIds VALUES (?, CAST(? AS TEXT))", (20, BAD_UTF8))
    nvtx: list[tuple[int, int, int, str | None, None, int, None, int]] = [
        (1000 + 1000 * i, 1800 + 1000 * i, 59, n, None, gtid, None, 0) for i, n in enumerate(NASTY)
    ]
    nvtx.append((5000, 5800, 59, None, None, gtid, None, 0))
    # Start/end ranges crossing the push/pop ranges and each other: they need (async) tracks.
    nvtx += [(1500, 2500, 60, "crossing A", None, gtid, None, 0), (1600, 3500, 60, "crossing B", None, gtid, None, 0)]
    con.executemany("INSERT INTO NVTX_EVENTS VALUES (?,?,?,?,?,?,?,?)", nvtx)
    con.execute("UPDATE NVTX_EVENTS SET text = CAST(? AS TEXT) WHERE start = 5000", (BAD_UTF8,))
    names = [10, 11, 12, 20]
    con.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,?,?,?,?,?)",
        [(s, s + 50, 0, gtid, 7 + i, 1, 0) for i, s in enumerate((1100, 1300, 1500, 5100))],
    )
    # Kernels 0 and 1 overlap on one stream (broken input): the trace must still nest.
    kernels = [(2000, 2600), (2300, 2900), (2400, 2500), (6000, 6100)]
    con.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        [
            (s, e, 0, 1, 7, 7 + i, gpid, names[i], None, None, 1, 1, 1, 32, 1, 1, 16, 0, 0)
            for i, (s, e) in enumerate(kernels)
        ],
    )
    con.commit()
    con.close()


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_hostile_names_round_trip(tmp_path: Path, suffix: str) -> None:
    db = tmp_path / "nasty.sqlite"
    _synthetic(db)
    out = tmp_path / f"t{suffix}"
    stats = export_chrome_trace(db, out)
    doc = load_strict(out)
    validate(doc)
    names = {e["name"] for e in _events_in(doc)}
    for name in NASTY:
        assert name in names  # the NVTX range and the kernel, verbatim
    replaced = BAD_UTF8.decode("utf-8", "replace")
    assert replaced in names
    assert stats.overlapping_gpu_ops >= 1
    kernels = [e for e in _events_in(doc) if e["cat"] == "kernel"]
    assert len(kernels) == 4
    assert len({e["tid"] for e in kernels}) == 3  # each overlapping kernel moved to a lane of its own
    crossing = {e["name"]: e["tid"] for e in _events_in(doc) if e["name"].startswith("crossing")}
    track_names = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert len(set(crossing.values())) == 2 and all("(async" in track_names[t] for t in crossing.values())


def test_trace_is_readable_by_holistic_trace_analysis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HTA reads one trace per rank from a directory; its kernel time per rank equals gpu_ops'."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from hta.trace_analysis import TraceAnalysis
    except ImportError as exc:
        pytest.skip(f"holistictraceanalysis is not installed ({exc}); pip install -e '.[test]'")
    monkeypatch.setenv("HTA_DISABLE_NS_ROUNDING", "1")  # keep ns precision: compare exactly
    for name in (LM, FSDP):
        path = real_db(name)
        report = nvbridge.load(path)
        gpu = report.gpu_ops
        pids = sorted(set(np_col(gpu, "process_id", fill=-1).tolist()) - {-1})
        trace_dir = tmp_path / name
        trace_dir.mkdir()
        want: dict[tuple[int, bool], int] = {}
        kind = np.asarray(gpu.column("kind").cast("string").to_numpy(zero_copy_only=False))
        dur = np_col(gpu, "end_ns") - np_col(gpu, "start_ns")
        export_chrome_traces(report, trace_dir / "t.json.gz", split="rank")  # ranks: GPU processes by pid
        for rank, pid in enumerate(pids):
            mine = np_col(gpu, "process_id", fill=-1) == pid
            want[(rank, False)] = int(dur[mine & (kind == "kernel")].sum())
            want[(rank, True)] = int(dur[mine & np.isin(kind, ["memcpy", "memset"])].sum())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            analysis = TraceAnalysis(trace_dir=str(trace_dir))
            _, per_kernel = analysis.get_gpu_kernel_breakdown(visualize=False)
        # HTA lists kernels per rank (COMPUTATION, COMMUNICATION) and copies/sets (MEMORY).
        per_kernel["memory"] = per_kernel["kernel_type"].eq("MEMORY")
        got = per_kernel.groupby(["rank", "memory"])["sum (us)"].sum()
        got = {(int(r), bool(m)): ns(float(v)) for (r, m), v in got.items()}
        assert got == {k: v for k, v in want.items() if v}, name
