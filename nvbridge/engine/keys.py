"""Correlation keys: GPU ops and syncs find their API call by (process, correlation id)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from nvbridge.columns import np_col
from nvbridge.errors import CorrelationError

BIG = np.iinfo(np.int64).max
# lookup_keys indexes a table when the key range is at most this many times the rows.
DENSE_KEYS = 4


def through(values: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``values[index]`` where index >= 0, else -1 (works when ``values`` is empty)."""
    if len(values) == 0:
        return np.full(len(index), -1, np.int64)
    return np.where(index >= 0, values[np.maximum(index, 0)], -1)


def lookup_keys(keys: np.ndarray, queries: np.ndarray, size: int | None = None) -> np.ndarray:
    """Position of each query in ``keys`` (first occurrence), or -1; keys below 0 match nothing.

    With every key and query in ``range(size)`` and ``size`` small next to the rows (dense
    correlation ids), one table indexed by key answers each query without a sort: at 10M NVTX
    rows 0.1 s instead of 0.4 s.
    """
    if size is not None and size <= DENSE_KEYS * (len(keys) + len(queries)):
        first = np.full(size, BIG, np.int64)
        valid = np.flatnonzero(keys >= 0)
        np.minimum.at(first, keys[valid], valid)
        found = first[queries]
        return np.where(found == BIG, -1, found)
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    pos = np.clip(np.searchsorted(sorted_keys, queries, "left"), 0, max(len(keys) - 1, 0))
    if len(keys) == 0:
        return np.full(len(queries), -1, np.int64)
    return np.where(sorted_keys[pos] == queries, order[pos], -1)


def correlation_keys(
    api_proc: np.ndarray, api_corr: np.ndarray, gpu_proc: np.ndarray, gpu_corr: np.ndarray
) -> tuple[np.ndarray, np.ndarray, int]:
    """One int64 key per (process, correlation id), ids repeating across processes; and the
    bound of the keys (every key is below it)."""
    # Dense process indices by hashing (a handful of processes over millions of rows); the two
    # chunks share one dictionary, so nothing is concatenated.
    enc = pa.chunked_array([pa.array(api_proc, pa.int64()), pa.array(gpu_proc, pa.int64())]).dictionary_encode()
    inverse = np.concatenate(
        [np.asarray(c.indices.to_numpy(zero_copy_only=False), np.int64) for c in enc.chunks] or [np.zeros(0, np.int64)]
    )
    api_inv, gpu_inv = inverse[: len(api_proc)], inverse[len(api_proc) :]
    processes = len(enc.chunk(0).dictionary) if enc.num_chunks else 0
    width = int(max(api_corr.max(initial=0), gpu_corr.max(initial=0))) + 2
    if processes * width >= 2**62:
        raise CorrelationError("correlation ids too large to key; please report this file")
    return api_inv * width + api_corr + 1, gpu_inv * width + gpu_corr + 1, processes * width


def api_by_correlation(api: pa.Table, procs: np.ndarray, corr: np.ndarray) -> np.ndarray:
    """Position of the API call with each row's (process, correlation id), or -1. The API keys
    and the rows' keys come from one call, so they share one process numbering and width."""
    a_corr = np_col(api, "correlation_id", fill=-1)
    a_key, key, size = correlation_keys(np_col(api, "process_key", fill=0), a_corr, procs, corr)
    found = lookup_keys(np.where(a_corr >= 0, a_key, -1), key, size)
    return np.where(corr >= 0, found, -1)


def match_gpu_ops(api: pa.Table, gpu: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """GPU ops -> API call by (process, correlation id).

    Returns the start order of the GPU ops (their gpu_op_id order), and in that order their
    start, end and API call position (-1 without one).
    """
    g_start, g_end = np_col(gpu, "start_ns"), np_col(gpu, "end_ns")
    g_order = np.argsort(g_start, kind="stable")
    g_api = api_by_correlation(
        api, np_col(gpu, "process_key", fill=0)[g_order], np_col(gpu, "correlation_id", fill=-1)[g_order]
    )
    return g_order, g_start[g_order], g_end[g_order], g_api
