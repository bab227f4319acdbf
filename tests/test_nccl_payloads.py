"""Collective bytes from NCCL's own NVTX payloads (nvbridge.readers.nccl_payloads,
nvbridge.dataset.nccl_bytes).

The real FSDP export records NCCL's domain and its payload schemas but no payload values; the
SYNTHETIC copy (scripts/record/synthetic_nccl_payloads.py, made in tmp, never kept) fills them
over the file's own schemas. Expected bytes are decoded here independently: the schema entries
and blobs read by raw SQL, the fields unpacked with struct by the entries' offsets and types.
"""

from __future__ import annotations

import struct
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import nvbridge
from nvbridge.dataset import collectives_read, nccl_bytes
from nvbridge.dataset import collectives_scan as scan
from nvbridge.readers import nccl_payloads
from scripts.record import synthetic_nccl_payloads as synthetic
from tests.conftest import raw, real_db

FSDP = "nsys-2026.2-pytorch2-fsdp-2gpu.sqlite"
# NVTX entry types the test unpacks (nvToolsExtPayload.h: 18 uint64, 22 size_t, 5 int)
_FORMATS = {5: "<i", 18: "<Q", 22: "<Q"}


@pytest.fixture(scope="module")
def synthetic_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("nccl") / "fsdp-synthetic-nccl-payloads.sqlite"
    assert synthetic.main([str(real_db(FSDP)), str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def converted(synthetic_export: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("nccl_ds") / "ds"
    nvbridge.convert(synthetic_export, out)
    return out


def _sizes_by_raw_sql(path: Path) -> dict[tuple[int, int], tuple[str, int]]:
    """(globalTid, start) -> (range name, message size) of every NCCL range with a payload,
    decoded here: header = 4 uint64 (domain, schema, size, start of payload), then the struct."""
    entries = {
        (d, s): (t, o or 0)
        for d, s, t, o in raw(
            path,
            'SELECT domainId, schemaId, "type", "offset" FROM NVTX_PAYLOAD_SCHEMA_ENTRIES '
            "WHERE name = 'Message size [bytes]'",
        )
    }
    out = {}
    rows = raw(
        path,
        "SELECT e.globalTid, e.start, e.domainId, s.value, e.binaryData FROM NVTX_EVENTS e "
        "JOIN StringIds s ON s.id = e.textId WHERE e.binaryData IS NOT NULL",
    )
    for gtid, start, domain, name, blob in rows:
        dom, schema, size, at = struct.unpack_from("<4Q", blob, 0)
        assert dom == domain and len(blob) == at + size
        typ, offset = entries[(domain, schema)]
        out[(gtid, start)] = (name, struct.unpack_from(_FORMATS[typ], blob, at + offset)[0])
    return out


def _expected_alltoall_bytes(path: Path) -> dict[int, list[int]]:
    """Per process, in issue order: each torch ``nccl:all_to_all`` range's sends summed (an
    alltoall's size as nccl-tests counts it: this rank's send buffer, one send per peer)."""
    sizes = _sizes_by_raw_sql(path)
    ranges = raw(
        path,
        "SELECT e.globalTid, e.start, e.end FROM NVTX_EVENTS e WHERE e.text LIKE 'nccl:all_to_all%' ORDER BY e.start",
    )
    out: dict[int, list[int]] = defaultdict(list)
    for gtid, start, end in ranges:
        sent = [b for (g, s), (n, b) in sizes.items() if g == gtid and start <= s <= end and n == "ncclSend"]
        if sent:
            out[(gtid >> 24) & 0xFFFFFF].append(sum(sent))
    return dict(out)


def test_synthetic_copy_is_labelled_and_filled_by_the_files_own_schemas(synthetic_export: Path) -> None:
    label = dict(raw(synthetic_export, "SELECT name, value FROM NVBRIDGE_SYNTHETIC"))
    assert label["synthetic"] == "yes"
    sends = raw(
        synthetic_export,
        "SELECT count(*) FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId "
        "WHERE s.value IN ('ncclSend', 'ncclRecv')",
    )[0][0]
    assert int(label["rows_filled"]) == sends > 0
    assert raw(real_db(FSDP), "SELECT count(binaryData) FROM NVTX_EVENTS")[0][0] == 0  # the input untouched


def test_alltoall_bytes_are_the_sum_of_ncclsend_payloads(synthetic_export: Path, converted: Path) -> None:
    expected = _expected_alltoall_bytes(synthetic_export)
    table = collectives_read.read_collectives(converted)
    assert table is not None
    from_payload = table.filter(pc.equal(table.column("bytes_source").cast(pa.string()), "nccl_payload"))
    assert set(from_payload.column("op").to_pylist()) == {"alltoall"}
    got: dict[int, list[int]] = defaultdict(list)
    rows = from_payload.sort_by([("process_id", "ascending"), ("arrival_ns", "ascending")])
    for proc, size in zip(rows.column("process_id").to_pylist(), rows.column("bytes").to_pylist()):
        got[proc].append(size)
    assert dict(got) == expected
    assert sum(len(v) for v in expected.values()) >= 50  # 30 alltoalls per rank in the FSDP run
    # bandwidths use those bytes: algbw = bytes / transfer
    matched = from_payload.filter(pc.greater(from_payload.column("transfer_ns"), 0))
    algbw = np.array(matched.column("bytes").to_pylist()) / np.array(matched.column("transfer_ns").to_pylist())
    np.testing.assert_allclose(matched.column("algbw_gbps").to_numpy(), algbw)


def test_rematching_from_the_dataset_reads_the_kept_payloads(converted: Path) -> None:
    # what a many-report root (and summary) does: match again from the converted tables
    assert (converted / nccl_bytes.FILE).is_file()
    again = collectives_read.collectives_of(converted).table
    written = collectives_read.read_collectives(converted)
    assert written is not None
    assert again.column("bytes").to_pylist() == written.column("bytes").to_pylist()
    assert again.column("bytes_source").to_pylist() == written.column("bytes_source").to_pylist()


def test_without_payload_values_nothing_comes_from_payloads(tmp_path: Path) -> None:
    nvbridge.convert(real_db(FSDP), tmp_path / "ds")
    table = collectives_read.read_collectives(tmp_path / "ds")
    assert table is not None and table.num_rows > 0
    assert table.column("bytes_source").null_count == table.num_rows  # no shapes recorded either
    assert not (tmp_path / "ds" / nccl_bytes.FILE).exists()


_KNOWN = {(1, 1 << 24 | 9): nccl_payloads.Schema(24, {"comm": (0, "<u8"), "bytes": (8, "<u8"), "peer": (16, "<i4")})}


def _row(blob: bytes, json_text: str | None = None) -> tuple[object, ...]:
    return (100, 200, (7 << 24) | 8, 1, "ncclSend", blob, json_text)


def _blob(schema: int, size: int, fourth: int, payload: bytes) -> bytes:
    return struct.pack("<4Q", 1, schema, size, fourth) + payload


def test_a_blob_whose_header_disagrees_with_the_file_is_not_decoded() -> None:
    body = struct.pack("<QQi4x", 0xABC, 12345, 1)
    good = [_blob(1 << 24 | 9, 24, 32, body), _blob(1 << 24 | 9, 24, 56, body)]  # start, or total size
    bad = [
        _blob(1 << 24 | 10, 24, 32, body),  # a schema the file does not declare
        _blob(1 << 24 | 9, 16, 32, body),  # another size than the schema's
        _blob(1 << 24 | 9, 24, 32, body[:20]),  # shorter than the schema
        body,  # no header
    ]
    out = nccl_payloads.decode([_row(b) for b in good + bad], _KNOWN)
    assert out.undecoded == len(bad)
    assert out.table.column("bytes").to_pylist() == [12345, 12345]
    assert out.table.column("peer").to_pylist() == [1, 1]
    assert out.table.column("comm").to_pylist() == ["0x0000000000000abc"] * 2
    assert out.table.column("process_id").to_pylist() == [7, 7]


def test_json_payloads_are_read_by_the_schemas_labels() -> None:
    text = '{"payload": {"NCCL communicator ID": 18446744073709551615, "Message size [bytes]": 4096, "Peer rank": 3}}'
    out = nccl_payloads.decode([_row(b"", text), _row(b"", '{"something": 1}')], _KNOWN)
    assert out.table.column("bytes").to_pylist() == [4096]
    assert out.table.column("comm").to_pylist() == ["0xffffffffffffffff"]
    assert out.undecoded == 1


@pytest.mark.parametrize(
    ("ranges", "size", "share"),
    [
        ([("allreduce", 100), ("allreduce", 50)], 150, False),  # coalesced buffers add up
        ([("allgather", 64)], 64, True),  # one rank's share: times the communicator's ranks
        ([("send", 10), ("recv", 10), ("send", 30), ("recv", 30)], 40, False),  # what this rank sends
        ([("recv", 8)], 8, False),  # a group that only receives
        ([("allreduce", 1), ("reduce_scatter", 2)], None, False),  # no one count for both
        ([("barrier", 5), (None, 9)], None, False),
    ],
)
def test_a_collectives_size_from_its_ranges_payloads(
    ranges: list[tuple[str | None, int]], size: int | None, share: bool
) -> None:
    g = nccl_bytes.GroupBytes()
    for op, n in ranges:
        g.add(op, n)
    assert g.size() == (size, share)


def test_a_share_counts_times_the_ranks() -> None:
    out = nccl_bytes.scaled(pa.array([64, 64, None], pa.int64()), np.array([True, False, True]), np.array([4, 4, 4]))
    assert out.to_pylist() == [256, 64, None]


def test_a_raw_nccl_group_is_one_collective_with_its_calls_payloads() -> None:
    # a program calling NCCL itself: ncclGroupStart, ncclSend, ncclRecv, ncclGroupEnd as sibling
    # ranges on one thread, the kernel launched inside ncclGroupEnd
    names = ["ncclGroupStart", "ncclSend", "ncclRecv", "ncclGroupEnd", "ncclAllReduce"]
    ranges = pa.table(
        {
            "op_id": [1, 2, 3, 4, 5],
            "op_name": names,
            "process_id": [9] * 5,
            "thread_id": [9] * 5,
            "start_ns": [0, 20, 40, 60, 200],
            "end_ns": [10, 30, 50, 100, 300],
            "step": pa.nulls(5, pa.int64()),
        }
    )
    kernels = pa.table(
        {
            "op_id": [4, 5],
            "kind": ["kernel"] * 2,
            "name": ["ncclDevKernel_SendRecv", "ncclDevKernel_AllReduce_Sum_f32_RING_LL"],
            "process_id": [9, 9],
            "device_id": [0, 0],
            "start_ns": [150, 400],
            "end_ns": [160, 500],
        }
    )
    payloads = pa.table({"op_id": [2, 3, 5], "bytes": [100, 100, 4096]})
    found = scan.instances(ranges, kernels, payloads).table
    assert found.column("kernels").to_pylist() == [1, 1]
    assert found.column("issue_ns").to_pylist() == [0, 200]
    assert found.column("bytes").to_pylist() == [100, 4096]
    assert found.column("bytes_source").to_pylist() == ["nccl_payload", "nccl_payload"]
    assert found.column("op").to_pylist() == ["send", "allreduce"]


def test_damaged_schema_rows_and_ranges_are_left_out_not_fatal() -> None:
    sid = 5 << 24
    entries: list[tuple[object, ...]] = [
        (1, sid, 0, "x", "Message size [bytes]", 8),  # a type that is no integer
        (1, sid, 1, 22, "Message size [bytes]", 20),  # past the payload's 24 bytes
        (1, sid, 2, 5, "Peer rank", -4),  # before it
        (1, sid, 3, 5, "Root", 16),
        (2, sid, 0, 5, "Root", 0),  # a schema the file does not size
    ]
    known = nccl_payloads.build_schemas({(1, sid): 24}, entries)
    assert known == {(1, sid): nccl_payloads.Schema(24, {"root": (16, "<i4")})}
    assert not nccl_payloads._nccl_range(("12", 20, 3, 1, "ncclSend", b"", None))
    assert not nccl_payloads._nccl_range((10, 20, 3, 1, "aten::mm", b"", None))
    assert nccl_payloads._nccl_range((10, None, 3, 1, "ncclSend", b"", None))
