"""advise: each finding kind against figures computed here from raw SQL, and the accounting rules.

Real exports (../shared/real_db/) hold the patterns: the FSDP export's 30 cudaStreamSynchronize
waits under aten::copy_, pageable HtoD copies, exposed NCCL kernels and GPU idle gaps; the
PyTorch 1.4 nvprof report's .item() (blocking DtoH copy + stream sync under
_local_scalar_dense); the PyProf nsys report's launch-bound torch.__getattr__ kernels. Our own
recording sample_db/advise_cpu+synthetic_gpu.sqlite (real NVTX, SYNTHETIC GPU rows; see
sample_db/README.md) plants a slow DataLoader, .item() per step and pageable input copies.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
from click.testing import CliRunner

import nvbridge
from nvbridge.analysis.advise import Advice, advise_report
from nvbridge.cli import cli
from tests import raw_gpu, raw_waits
from tests.advise_reference import ADVISE, FSDP, LM, PID, PYPROF, _of, minus, raw, subtract
from tests.conftest import ALL_FILES, SAMPLE_DB, real_db
from tests.raw_gpu import length


@pytest.fixture(scope="module")
def fsdp() -> Advice:
    return advise_report(nvbridge.load(real_db(FSDP)))


def _gpu_by_lane(path: Path) -> dict[tuple[int, int], list[tuple[int, int]]]:
    """GPU op intervals per (pid, device), from the raw kernel, memcpy and memset tables."""
    lanes: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for table in ("KERNEL", "MEMCPY", "MEMSET"):
        for pid, dev, s, e in raw(path, f"SELECT {PID}, deviceId, start, end FROM CUPTI_ACTIVITY_KIND_{table}"):
            lanes[(int(pid), int(dev))].append((int(s), int(e)))
    return lanes


def test_fsdp_copy_syncs_are_blocking_copies_with_waits_and_idle_after_from_raw_sql(fsdp: Advice) -> None:
    """The 30 cudaStreamSynchronize right after an 8-byte pageable cudaMemcpyAsync under
    aten::copy_: torch's own blocking .to(device), not a synchronize the user wrote."""
    path = real_db(FSDP)
    rows = raw(
        path,
        """SELECT m.bytes, r.end - r.start, y.end - y.start FROM CUPTI_ACTIVITY_KIND_MEMCPY AS m
        JOIN CUPTI_ACTIVITY_KIND_RUNTIME AS r
          ON r.correlationId = m.correlationId AND (r.globalTid >> 24) = (m.globalPid >> 24)
        JOIN CUPTI_ACTIVITY_KIND_RUNTIME AS y ON y.globalTid = r.globalTid AND y.start = (
            SELECT min(x.start) FROM CUPTI_ACTIVITY_KIND_RUNTIME AS x
            WHERE x.globalTid = r.globalTid AND x.start > r.start)
        JOIN StringIds AS s ON s.id = y.nameId
        WHERE m.copyKind = 1 AND m.srcKind = 0 AND s.value LIKE 'cudaStreamSynchronize%'""",
    )
    assert len(rows) == 30
    (found,) = _of(fsdp, "blocking_copy_sync")
    figures = dict(found.figures)
    assert (found.op, found.count, figures["copies"], figures["pageable"]) == ("aten::copy_", 30, 30, 30)
    assert figures["wait_ns"] == sum(w for _, _, w in rows) == 289_752_725  # the calls, not the records
    assert figures["call_ns"] == sum(c for _, c, _ in rows)
    assert figures["htod_bytes"] == figures["bytes"] == sum(b for b, _, _ in rows)
    assert "non_blocking=True" in found.fix and "Remove the explicit synchronize" not in found.fix
    # time at stake: the copies' GPU time no kernel hides, and the GPU idle time after each wait,
    # capped at the time the host was blocked (raw side: tests/raw_gpu.py)
    r = raw_gpu.read(path)
    waits = [w for w in raw_waits.waits(r) if w.copies]
    lanes = raw_gpu.lanes(r)
    own = 0
    for lane, ops in lanes.items():
        hide = [(g.start, g.end) for g in ops if g.kind != "memcpy"]
        copies = [(g.start, g.end) for w in waits if w.lane == lane for g in w.copies]
        after = [w.after for w in waits if w.lane == lane]
        own += raw_gpu.length(raw_gpu.subtract(copies, hide) + after)
    assert found.own_ns == own > 0


def test_fsdp_gpu_idle_is_the_span_minus_busy_time_per_lane(fsdp: Advice) -> None:
    lanes = _gpu_by_lane(real_db(FSDP))
    idle = sum(max(e for _, e in v) - min(s for s, _ in v) - length(v) for v in lanes.values())
    assert sum(f.own_ns for f in _of(fsdp, "gpu_idle")) == idle
    assert fsdp.span_ns == sum(max(e for _, e in v) - min(s for s, _ in v) for v in lanes.values())


def test_fsdp_exposed_nccl_is_nccl_time_not_under_other_kernels(fsdp: Advice) -> None:
    rows = raw(
        real_db(FSDP),
        f"""SELECT {PID}, k.deviceId, k.start, k.end, s.value
        FROM CUPTI_ACTIVITY_KIND_KERNEL AS k JOIN StringIds AS s ON s.id = k.demangledName""",
    )
    nccl: dict[str, list[tuple[int, int]]] = defaultdict(list)
    other: dict[str, list[tuple[int, int]]] = defaultdict(list)
    # ranks as the one rule numbers them: by the lowest GPU each process used, then pid
    lowest: dict[int, int] = {}
    for pid, dev, *_ in sorted(rows, key=lambda r: (r[1], r[0])):
        lowest.setdefault(int(pid), int(dev))
    rank = {pid: i for i, pid in enumerate(sorted(lowest, key=lambda p: (lowest[p], p)))}
    for pid, dev, s, e, name in rows:
        lane = f"rank {rank[int(pid)]} GPU {dev}"
        (nccl if "nccl" in str(name).lower() else other)[lane].append((int(s), int(e)))
    found = _of(fsdp, "nccl_exposed")
    assert {f.lanes for f in found} == {(lane,) for lane in nccl}
    for lane in nccl:
        expected = minus(nccl[lane], other[lane])
        assert sum(f.own_ns for f in found if f.lanes == (lane,)) == expected > 0


def test_fsdp_pageable_copies_match_memory_kinds_in_raw_sql(fsdp: Advice) -> None:
    rows = raw(
        real_db(FSDP), "SELECT start, end, bytes FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE srcKind = 0 OR dstKind = 0"
    )  # ENUM_CUDA_MEM_KIND 0: pageable
    found = _of(fsdp, "pageable_copy") + _of(fsdp, "blocking_copy_sync")
    assert sum(dict(f.figures)["pageable"] for f in found) == len(rows) == 32
    assert sum(dict(f.figures)["bytes"] for f in found) == sum(int(b) for _, _, b in rows)
    # 30 are blocking copies (a sync follows); the 2 whose calls precede the capture are not
    assert sum(dict(f.figures)["copies"] for f in _of(fsdp, "pageable_copy")) == 2


def test_lm_item_is_a_blocking_copy_under_local_scalar_dense() -> None:
    path = real_db(LM)
    copies = raw(
        path,
        """SELECT r.end - r.start FROM CUPTI_ACTIVITY_KIND_MEMCPY AS m
        JOIN CUPTI_ACTIVITY_KIND_RUNTIME AS r ON r.correlationId = m.correlationId
        WHERE m.copyKind = 2 AND m.dstKind = 1""",
    )  # DtoH into pageable memory (CUPTI kinds)
    syncs = raw(path, "SELECT end - start FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE cbid = 131")  # StreamSynchronize
    found = _of(advise_report(nvbridge.load(path)), "blocking_copy_sync")
    assert sum(dict(f.figures)["copies"] for f in found) == len(copies) == len(syncs) == 21
    assert sum(dict(f.figures)["wait_ns"] for f in found) == sum(int(d) for (d,) in syncs)
    assert sum(dict(f.figures)["call_ns"] for f in found) == sum(int(d) for (d,) in copies)
    top = found[0]
    assert top.op == "_local_scalar_dense" and top.count == 19 and ".item()" in top.fix


def test_pyprof_launch_bound_kernels_match_raw_sql() -> None:
    path = real_db(PYPROF)
    kernels = raw(
        path,
        """SELECT r.globalTid, r.start, r.end, k.end - k.start
        FROM CUPTI_ACTIVITY_KIND_KERNEL AS k JOIN CUPTI_ACTIVITY_KIND_RUNTIME AS r
          ON r.correlationId = k.correlationId AND (r.globalTid >> 24) = (k.globalPid >> 24)
        WHERE r.end - r.start <= 1000000""",
    )  # longer launch calls are one-time set-up
    ranges = raw(
        path,
        """SELECT globalTid, start, coalesce(end, 1 << 62), coalesce(text, s.value)
        FROM NVTX_EVENTS LEFT JOIN StringIds AS s ON s.id = textId WHERE eventType = 59""",
    )
    getattr_text = "{'mod': 'torch', 'op': '__getattr__', 'args': [{'name': '', 'type': 'str', 'value': 'extra_repr'}]}"
    by_call: dict[tuple[int, int, int], list[tuple[int, int]]] = defaultdict(list)
    for tid, s, e, k_ns in kernels:  # the innermost range around each launch call
        around = [(rs, -re, text, tid) for t, rs, re, text in ranges if t == tid and rs <= s and re >= e]
        if around and max(around)[2] == getattr_text:
            rs, neg_re, _, _ = max(around)
            by_call[(tid, rs, -neg_re)].append((e - s, k_ns))
    expected = [
        (launch, k)
        for rows in by_call.values()
        for launch, k in rows
        if k < launch or (len(rows) >= 8 and sum(k for _, k in rows) < 10_000 * len(rows))
    ]
    found = [f for f in _of(advise_report(nvbridge.load(path)), "launch_bound") if f.op == "torch.__getattr__"]
    assert len(found) == 1 and found[0].count == len(expected) == 178
    assert dict(found[0].figures) == {
        "kernel_ns": sum(k for _, k in expected),
        "launch_ns": sum(x for x, _ in expected),
    }


def test_own_recording_names_the_slow_dataloader_the_item_sync_and_the_pageable_copies() -> None:
    advice = advise_report(nvbridge.load(ADVISE))
    steps = raw(ADVISE, "SELECT start, end, text FROM NVTX_EVENTS WHERE text LIKE 'ProfilerStep#%'")
    loads = raw(ADVISE, "SELECT start, end FROM NVTX_EVENTS WHERE text LIKE 'enumerate(DataLoader)#%'")
    in_steps = [(s, e) for s, e in loads if any(a <= s and e <= b for a, b, _ in steps)]
    top = advice.findings[0]
    assert top.kind == "gpu_idle" and top.op.startswith("enumerate(DataLoader)#") and "DataLoader" in top.fix
    # its time: the loads' own time (no nested range running) while the GPU had nothing to do
    ranges = raw(ADVISE, "SELECT start, end FROM NVTX_EVENTS WHERE eventType = 59")
    gpu = raw(
        ADVISE,
        "SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL SELECT start, end FROM CUPTI_ACTIVITY_KIND_MEMCPY",
    )
    own = [
        p
        for s, e in in_steps
        for p in subtract([(s, e)], [(a, b) for a, b in ranges if s <= a and b <= e and (a, b) != (s, e)])
    ]
    timeline = [(min(s for s, _ in gpu), max(e for _, e in gpu))]  # the GPU's: first to last op
    assert top.own_ns == length(raw_gpu.intersect(subtract(own, gpu), timeline))
    assert top.own_ns >= 0.9 * sum(e - s for s, e in in_steps)
    assert top.step in {0, 1, 2} and len(in_steps) == 4  # the one in step 3 ends the loop (StopIteration)

    item = raw(
        ADVISE,
        """SELECT r.end - r.start FROM CUPTI_ACTIVITY_KIND_MEMCPY AS m
        JOIN CUPTI_ACTIVITY_KIND_RUNTIME AS r ON r.correlationId = m.correlationId WHERE m.copyKind = 2""",
    )
    (sync,) = _of(advice, "blocking_copy_sync")  # a DtoH copy into pageable memory returns when done
    assert sync.op == "aten::_local_scalar_dense" and sync.count == len(item) == 5
    assert dict(sync.figures)["call_ns"] == sum(int(d) for (d,) in item) and dict(sync.figures)["wait_ns"] == 0
    assert {s for s, _ in sync.by_step} <= {0, 1, 2, 3} and sync.step is not None and ".item()" in sync.fix

    copies = raw(ADVISE, "SELECT bytes FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 1 AND srcKind = 0")
    (pageable,) = _of(advice, "pageable_copy")
    assert pageable.op == "ProfilerStep (outside ops)" and pageable.count == len(copies) == 8
    assert dict(pageable.figures)["bytes"] == sum(int(b) for (b,) in copies)


@pytest.mark.parametrize(
    "name",
    [
        *ALL_FILES,
        "sample:advise_cpu+synthetic_gpu.sqlite",
        "sample:cnn_cpu+synthetic_gpu.sqlite",
        "sample:ranks_cpu+synthetic_gpu.sqlite",
    ],
)
def test_findings_add_up_honestly(name: str) -> None:
    path = SAMPLE_DB / name.removeprefix("sample:") if name.startswith("sample:") else real_db(name)
    advice = advise_report(nvbridge.load(path))
    # every moment is counted once: the findings' times add up to the union of all evidence
    assert sum(f.time_ns for f in advice.findings) == advice.at_stake_ns <= advice.span_ns
    for f in advice.findings:
        assert 0 < f.time_ns <= f.own_ns or (f.time_ns == 0 and dict(f.figures)["wait_ns"] > 0)
        assert sum(t for _, t in f.by_step) <= f.time_ns
    # within a step, the time at stake never exceeds the step (summed over the lanes that ran it)
    at_stake: dict[int, int] = defaultdict(int)
    for f in advice.findings:
        for step, t in f.by_step:
            at_stake[step] += t
    step_ns: dict[int, int] = defaultdict(int)
    for s in advice.steps:
        step_ns[s.step] += s.step_ns
        assert 0 <= s.busy_ns <= s.step_ns
    assert all(at_stake[n] <= step_ns[n] for n in at_stake)


def test_cli_fits_100_columns_and_json_has_the_same_findings() -> None:
    runner = CliRunner()
    for path in (str(ADVISE), str(real_db(FSDP)), str(real_db(LM))):
        text = runner.invoke(cli, ["advise", path, "--limit", "-1", "--steps", "-1"])
        assert text.exit_code == 0, text.output
        assert max(len(line) for line in text.output.splitlines()) <= 100
        js = runner.invoke(cli, ["advise", path, "--json"])
        data = json.loads(js.output)
        assert len(data["findings"]) == text.output.count("\n     on ")
        assert sum(f["time_ns"] for f in data["findings"]) == data["at_stake_ns"]


def test_cli_bad_input_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "notes.sqlite"
    bad.write_text("not a database")
    result = CliRunner().invoke(cli, ["advise", str(bad)])
    assert result.exit_code == 1
    assert result.output.startswith("Error: ") and result.output.count("\n") == 1


def test_own_multi_process_recording_names_the_straggler_rank() -> None:
    path = SAMPLE_DB / "ranks_cpu+synthetic_gpu.sqlite"
    steps: dict[str, dict[int, int]] = defaultdict(dict)
    for pid, text, dur in raw(
        path,
        f"""SELECT {PID.replace("globalPid", "globalTid")}, text, end - start
                                        FROM NVTX_EVENTS WHERE text LIKE 'ProfilerStep#%'""",
    ):
        steps[text][pid] = dur
    slow = {max(by_pid, key=by_pid.__getitem__) for by_pid in steps.values()}
    (found,) = _of(advise_report(nvbridge.load(path)), "rank_skew")
    # both ranks ran on GPU 0: numbered by pid (nvbridge.dataset.ranks' rule)
    rank = {p: i for i, p in enumerate(sorted({p for by_pid in steps.values() for p in by_pid}))}
    assert len(slow) == 1 and found.lanes == (f"rank {rank[(pid := slow.pop())]} GPU 0",)
    assert found.count == len(steps) == 3
    # the slowest rank's extra time at the end of each of its steps, inside its GPU timeline
    ends = dict(
        raw(
            path,
            f"SELECT text, end FROM NVTX_EVENTS WHERE text LIKE 'ProfilerStep#%' AND "
            f"{PID.replace('globalPid', 'globalTid')} = {pid}",
        )
    )
    ((first, last),) = raw(
        path,
        f"""SELECT min(start), max(end) FROM (SELECT start, end, globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL
        UNION ALL SELECT start, end, globalPid FROM CUPTI_ACTIVITY_KIND_MEMCPY) WHERE {PID} = {pid}""",
    )
    skew = [(ends[t] - (max(v.values()) - min(v.values())), ends[t]) for t, v in steps.items()]
    assert found.own_ns == length(raw_gpu.intersect(skew, [(first, last)])) > 0
    assert found.step == 0 and "straggler" in found.fix
