"""The collectives table on the two-process FSDP export (NCCL kernels, 2 GPUs): every NCCL
kernel matched with its partner, exposed communication and overlap equal to interval
arithmetic on raw SQL; the same export split into one report per process, one of them with its
clock shifted, gives the offset back and the same answers."""

from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import nvbridge
from nvbridge.analysis.rank_comm import across_ranks
from nvbridge.dataset.collectives_read import read_collectives, root_meta
from scripts.record.shift_clock import shift
from tests.conftest import raw, real_db
from tests.raw_gpu import length, subtract, union
from tests.split_report import split_process

FSDP = "nsys-2026.2-pytorch2-fsdp-2gpu.sqlite"
PID = 0xFFFFFF


def _kernels(path: Path, nccl: bool = True) -> dict[int, list[tuple[int, int]]]:
    """Each process's NCCL kernels (``nccl``) or other kernels, (start, end) in start order, from raw SQL."""
    rows = raw(
        path,
        "SELECT (k.globalPid >> 24) & 16777215, k.start, k.end FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        f"JOIN StringIds s ON s.id = k.demangledName WHERE s.value {'' if nccl else 'NOT '}LIKE 'nccl%' "
        "ORDER BY k.start",
    )
    out: dict[int, list[tuple[int, int]]] = {}
    for pid, s, e in rows:
        out.setdefault(pid, []).append((s, e))
    return out


@pytest.fixture(scope="module")
def fsdp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fsdp") / "ds"
    nvbridge.convert(real_db(FSDP), out)
    return out


def test_every_nccl_kernel_is_matched_with_its_partner(fsdp: Path) -> None:
    kernels = _kernels(real_db(FSDP))
    assert len(kernels) == 2 and len({len(v) for v in kernels.values()}) == 1
    table = read_collectives(fsdp)
    assert table is not None and pc.all(table.column("matched")).as_py()
    assert table.num_rows == sum(len(v) for v in kernels.values())
    rows = table.to_pylist()
    by = {(r["process_id"], r["seq"]): r for r in rows}
    (a, ka), (b, kb) = sorted(kernels.items())
    for seq, ((sa, ea), (sb, eb)) in enumerate(zip(ka, kb)):
        ra, rb = by[(a, seq)], by[(b, seq)]
        # the k-th kernel of each process is the k-th collective, and the partners end together
        assert (ra["start_ns"], ra["end_ns"], rb["start_ns"], rb["end_ns"]) == (sa, ea, sb, eb)
        assert abs(ea - eb) < 50_000
        last = max(sa, sb)
        assert (ra["wait_ns"], rb["wait_ns"]) == (last - sa, last - sb)
        assert (ra["transfer_ns"], rb["transfer_ns"]) == (ea - last, eb - last)
        assert ra["comm"] == rb["comm"] and ra["op"] == rb["op"]
    # the collectives torch issued are named by torch's op (alltoall runs as SendRecv kernels)
    ops = raw(real_db(FSDP), "SELECT count(*) FROM NVTX_EVENTS WHERE text LIKE 'c10d::alltoall_base_%'")[0][0]
    assert sum(1 for r in rows if r["op"] == "alltoall") == ops


def test_exposed_communication_and_overlap_equal_interval_arithmetic(fsdp: Path) -> None:
    answer = across_ranks(fsdp)
    assert answer is not None
    table = read_collectives(fsdp)
    assert table is not None
    rank_of = dict(zip(table.column("process_id").to_pylist(), table.column("rank").to_pylist()))
    nccl, compute = _kernels(real_db(FSDP)), _kernels(real_db(FSDP), nccl=False)
    for pid, intervals in nccl.items():
        rank = rank_of[pid]
        total = length(intervals)
        exposed = length(subtract(union(intervals), compute.get(pid, [])))
        assert answer.comm_ns[rank] == total
        assert answer.exposed_comm_ns[rank] == exposed
        assert answer.overlap_pct[rank] == pytest.approx(100.0 * (total - exposed) / total)


@pytest.fixture(scope="module")
def split(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, int]:
    """The FSDP export as two reports (one per process), converted plain and with rank 1's clock shifted."""
    tmp = tmp_path_factory.mktemp("split")
    pids = sorted(_kernels(real_db(FSDP)))
    files = [split_process(real_db(FSDP), pid, tmp / f"rank{i}.sqlite") for i, pid in enumerate(pids)]
    wall = 7_123_456_789  # a host 7.1 s behind
    shifted_dir = tmp / "shifted"
    shifted_dir.mkdir()
    # scripts/record/shift_clock.py: every event 7.1 s later, the session's wall-clock start kept
    shift(files[1], shifted_dir / "rank1.sqlite", wall, "events")
    shifted = [files[0], shifted_dir / "rank1.sqlite"]
    nvbridge.convert(files, tmp / "plain")
    nvbridge.convert(shifted, tmp / "moved")
    return tmp / "plain", tmp / "moved", wall


def test_a_shifted_clock_is_recovered_and_the_answers_do_not_change(split: tuple[Path, Path, int]) -> None:
    plain, moved, wall = split
    a, b = root_meta(plain), root_meta(moved)
    # one host (one session split in two): the session starts agree with all 31 collectives;
    # the shifted copy's do not, and its collectives' ends place it
    assert (a["clock.rank1.source"], b["clock.rank1.source"]) == ("session", "collectives")
    assert int(a["clock.rank1.collectives"] or 0) == int(b["clock.rank1.collectives"] or 0) == 31
    # the shifted report's events are 7.1 s later on the same session start: the offset that
    # puts them back is 7.1 s earlier than the plain one's, within 10 us
    offset_a, offset_b = int(a["clock.rank1.offset_ns"] or 0), int(b["clock.rank1.offset_ns"] or 0)
    assert abs((offset_b + wall) - offset_a) <= 10_000
    assert a["clock.reliable"] == b["clock.reliable"] == "true"
    assert int(a["clock.rank1.residual_ns"] or 0) <= 10_000  # one host: the ends agree within 10 us
    ta, tb = read_collectives(plain), read_collectives(moved)
    assert ta is not None and tb is not None
    for col in ("op", "seq", "rank", "matched"):
        assert ta.column(col).to_pylist() == tb.column(col).to_pylist(), col
    for col in ("wait_ns", "transfer_ns"):  # within the offset's 10 us
        for x, y in zip(ta.column(col).to_pylist(), tb.column(col).to_pylist()):
            assert abs(x - y) <= 10_000, col


def test_a_many_report_dataset_keeps_the_table_and_root_meta_beside_its_partitions(
    split: tuple[Path, Path, int],
) -> None:
    plain = split[0]
    assert sorted(p.name for p in plain.iterdir()) == [
        "collectives.parquet",
        "ranks_meta.parquet",
        "report=rank0",
        "report=rank1",
    ]
    assert pq.read_schema(plain / "collectives.parquet").names == nvbridge.dataset.schema.COLLECTIVES.names
    # the partitioned dataset still reads as one (summary over both reports)
    assert nvbridge.summarize(plain).several


def test_communication_per_operation_equals_raw_kernel_arithmetic(fsdp: Path) -> None:
    """advise's communication figures: per operation, the kernels' time and the part of each
    kernel no compute kernel of its process overlaps, against raw SQL."""
    answer = across_ranks(fsdp)
    assert answer is not None
    nccl, compute = _kernels(real_db(FSDP)), _kernels(real_db(FSDP), nccl=False)
    ops = {c.op: c for c in answer.ops}
    # the first kernel of each process is a warm-up outside torch's ranges (SendRecv); the rest
    # are torch's c10d::alltoall_base_
    firsts = [k[0] for k in nccl.values()]
    rest = [(pid, k) for pid, ks in nccl.items() for k in ks[1:]]
    assert ops["sendrecv"].time_ns == sum(e - s for s, e in firsts)
    assert ops["alltoall"].time_ns == sum(e - s for _, (s, e) in rest)
    assert ops["alltoall"].exposed_ns == sum(length(subtract([k], compute.get(pid, []))) for pid, k in rest)
    assert ops["alltoall"].collectives == len(rest) // 2 and ops["alltoall"].ranks == 2
