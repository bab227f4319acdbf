"""CUDA API call names as torch.profiler (Kineto) writes them.

Nsight Systems names runtime calls after CUPTI's callback ids, which carry the CUDA version that
introduced the entry point: ``cudaLaunchKernel_v7000``, ``cudaMemcpyAsync_v3020``,
``cudaGetDeviceProperties_v2_v12000``. Kineto writes the function's name (``cudaLaunchKernel``,
``cudaGetDeviceProperties_v2``), and tools that read its traces match those names exactly
(Holistic Trace Analysis finds launches by ``cudaLaunchKernel``, ``cudaLaunchKernelExC``,
``cudaMemcpyAsync``, ``cudaMemsetAsync``). The callback-id suffix is always an underscore, a
``v`` and at least four digits (a CUDA version: 3020, 7000, 11060, 12000); a function's own
version is one digit (``cuMemAlloc_v2``, ``cudaStreamGetCaptureInfo_v2``) and stays. Driver
calls keep their names: CUPTI names them after the function (``cuLaunchKernelEx``,
``cuMemcpyHtoDAsync_v2``), as Kineto does. nvprof's names (read from callback ids by
``readers/cupti_cbids.py``) have no suffix and come through unchanged.

The name the report holds is kept in the slice's ``args`` as ``cbid name`` where it differs.
The work is done on the names' dictionary (a few hundred distinct names), never per row.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.columns import one_chunk

CBID_SUFFIX = r"_v[0-9]{4,}$"
CBID_ARG = "cbid name"  # the args key of the report's own (versioned) name


def api_names(names: pa.Array | pa.ChunkedArray, kind: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, pa.Array | None]:
    """The names a trace shows for these API calls, and the report's names where they differ
    (None when no name changes: the trace's lines are then what they were before names were
    rewritten).

    The names shown index one doubled dictionary: the stripped names, then the names as they
    are (a driver call's row points into the second half).
    """
    col = one_chunk(names)
    if not pa.types.is_dictionary(col.type):
        col = col.cast(pa.string()).dictionary_encode()
    values = col.dictionary.cast(pa.string())
    stripped = pc.replace_substring_regex(values, CBID_SUFFIX, "")
    changed = pc.fill_null(pc.not_equal(stripped, values), False)
    if not len(values) or not pc.any(changed).as_py():
        return col, None
    driver = pc.fill_null(pc.equal(one_chunk(kind).cast(pa.string()), "driver"), False)
    n = pa.scalar(len(values), pa.int32())
    indices = col.indices.cast(pa.int32())
    shown = pa.DictionaryArray.from_arrays(
        pc.add(indices, pc.if_else(driver, n, pa.scalar(0, pa.int32()))), pa.concat_arrays([stripped, values])
    )
    # null where the name is shown as it is: nothing is written for those rows
    renamed = pc.and_(pc.fill_null(pc.take(changed, indices), False), pc.invert(driver))
    versioned = pa.DictionaryArray.from_arrays(pc.if_else(renamed, indices, pa.scalar(None, pa.int32())), values)
    return shown, versioned
