"""The compute dtype a GPU kernel's name carries, and the one an op's kernels carry.

Where a report records no dtypes (torch's own NVTX names, PyProf markers without them, user
ranges) an op's FLOPs and bytes would assume float32; the kernels it launched say what ran.
Kernel names are stable across profiler versions (they are the libraries' symbols), so the
rules below read the names, never a profiler's enum, and classes of names, never a list of
kernels:

- math-library kernels (cuBLAS/cuBLASLt, CUTLASS, cuDNN, xmma, nvjet, flash and
  memory-efficient attention, cuFFT-based convolution, gemv): the precision their name spells,
  ``ampere_bf16_s16816gemm_bf16_...``, ``sm90_xmma_gemm_bf16bf16_bf16f32_f32_...``,
  ``cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_...``, ``turing_fp16_s1688gemm_fp16_...``,
  ``fmha_cutlassF_f16_aligned_...``, ``flash_fwd_kernel<..., cutlass::bfloat16_t, ...>``,
  ``cudnn::detail::implicit_convolve_sgemm<float, ...>``; or their BLAS letter,
  ``volta_sgemm_128x64_nn`` (float32), ``volta_h884gemm_...`` (float16), ``volta_dgemm``
  (float64), ``volta_scudnn_...`` (float32), an ``s`` with a tensor-core shape and no other type
  (``cutlass_80_tensorop_s1688gemm_...``: TF32, the only float32 math tensor cores do); nvjet's
  first type letter (``nvjet_tst_...`` bfloat16, ``nvjet_hsh_...`` float16, ``nvjet_sss_tf32``
  TF32, ``nvjet_qqtst_...`` fp8);
- any other kernel whose name spells a floating dtype: torch's templated kernels
  (``vectorized_elementwise_kernel<4, CUDAFunctor_add<c10::BFloat16>, ...>``), NCCL's
  (``ncclDevKernel_AllReduce_Sum_bf16_...``).

A name that spells several takes the lowest precision (the multiply's, not the accumulator's:
``f16f16_f16f32_f32`` is float16, ``tf32f32`` TF32, ``MulFunctor<float>`` over ``c10::Half`` is
float16). An op takes its kernels' (its own and those of the ops inside it): a math-library
kernel's dtype over any other's, then the lowest precision.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.columns import one_chunk

__all__ = ["DTYPES", "NONE", "codes", "dtype_names", "name_code", "subtree_min"]

# Precision ranks, lowest first; a code is class * 8 + rank (class 0: math library, 1: other).
DTYPES = ("fp8", "int8", "float16", "bfloat16", "tf32", "float32", "float64")
NONE = 255  # no dtype in the name (uint8: codes take one byte a row)
_RANK = {name: rank for rank, name in enumerate(DTYPES)}

_LIBRARY = re.compile(
    r"gemm|gemv|cublas|cudnn|xmma|cutlass|nvjet|fmha|flash|attention|attn|sdpa|conv(?!ert)|winograd|fft|im2col|dot_kernel"
)
# Types glued together in xmma/CUTLASS names (f16f16, bf16bf16, tf32f32, e4m3e4m3) are split first.
_GLUED = re.compile(r"(bf16|tf32|f16|f32|f64|e4m3|e5m2)(?=bf16|tf32|f16|f32|f64|e4m3|e5m2)")
# A token stands alone (digits may follow a name, float2; the two-character ones must end there:
# s884gemm is no s8).
_TOKEN = re.compile(
    r"(?<![a-z0-9])(?:(bfloat16|bf16|float16|fp16|f16|half|tf32|float8|fp8|e4m3|e5m2|int8|"
    r"float64|fp64|f64|double|float32|fp32|f32|float)(?![a-z])|(f8|i8|s8)(?![a-z0-9]))"
)
_TOKEN_DTYPE = {
    **dict.fromkeys(("bfloat16", "bf16"), "bfloat16"),
    **dict.fromkeys(("float16", "fp16", "f16", "half"), "float16"),
    "tf32": "tf32",
    **dict.fromkeys(("float8", "fp8", "f8", "e4m3", "e5m2"), "fp8"),
    **dict.fromkeys(("int8", "i8", "s8"), "int8"),
    **dict.fromkeys(("float64", "fp64", "f64", "double"), "float64"),
    **dict.fromkeys(("float32", "fp32", "f32", "float"), "float32"),
}
# BLAS-style letters before gemm/gemv/cudnn: s(ingle), d(ouble), h(alf), c/z (complex single/
# double), gc (cuDNN's FFT complex gemm), i(nt8); digits after the letter are a tensor-core shape.
_LETTER = re.compile(r"(?<![a-z0-9])(gc|[sdhczi])(\d*)(?:gemm|gemv|cudnn)")
_LETTER_DTYPE = {
    "s": "float32",
    "c": "float32",
    "gc": "float32",
    "d": "float64",
    "z": "float64",
    "h": "float16",
    "i": "int8",
}
# cuBLASLt's nvjet kernels: the first letter after ``nvjet_`` is the A/B operands' type.
_NVJET = re.compile(r"(?<![a-z0-9])nvjet_([a-z])")
_NVJET_DTYPE = {"h": "float16", "t": "bfloat16", "s": "float32", "q": "fp8", "e": "fp8"}


def name_code(name: str) -> int:
    """The code (class * 8 + precision rank, NONE) of one kernel name."""
    text = _GLUED.sub(r"\1_", name.lower())
    found = {_TOKEN_DTYPE[m.group(1) or m.group(2)] for m in _TOKEN.finditer(text)}
    library = _LIBRARY.search(text) is not None
    if library:
        for m in _LETTER.finditer(text):
            letter = m.group(1)
            # An s with a tensor-core shape computes in TF32 unless the name spells the inputs' type.
            found.add("tf32" if letter == "s" and m.group(2) else _LETTER_DTYPE[letter])
        nvjet = _NVJET.search(text)
        if nvjet and nvjet.group(1) in _NVJET_DTYPE:
            found.add(_NVJET_DTYPE[nvjet.group(1)])
    if "tf32" in found:
        found.discard("float32")  # TF32 math over float32 storage (tf32f32, s1688gemm_tf32)
    if not found:
        return NONE
    return (0 if library else 1) * 8 + min(_RANK[d] for d in found)


def codes(names: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Each kernel name's code (uint8), each distinct name read once."""
    column = one_chunk(names)
    if not pa.types.is_dictionary(column.type):
        column = column.cast(pa.string()).dictionary_encode()
    table = np.array([NONE if v is None else name_code(str(v)) for v in column.dictionary.to_pylist()] + [NONE])
    index = np.asarray(column.indices.fill_null(len(column.dictionary)).to_numpy(zero_copy_only=False), np.int64)
    out: np.ndarray = table.astype(np.uint8)[index]
    return out


def dtype_names(code: np.ndarray) -> pa.Array:
    """The dtype each code names (null for NONE)."""
    known = code != NONE
    rank = np.where(known, code.astype(np.int64) % 8, 0)
    return pa.array(np.array(DTYPES, object)[rank], pa.string(), mask=~known)


def subtree_min(parent: np.ndarray, own: np.ndarray) -> np.ndarray:
    """Each row's lowest code over itself and its descendants (``parent``: the parent's row,
    -1 at a root). Only the rows with a code climb, one level a turn, the lowest per parent
    going on: the work is their number times the depth, not the window's size."""
    out: np.ndarray = own.copy()
    rows = np.flatnonzero(own != NONE)
    values = own[rows]
    while len(rows):
        up = parent[rows]
        keep = up >= 0
        up, values = up[keep], values[keep]
        if not len(up):
            break
        order = np.lexsort((values, up))
        up, values = up[order], values[order]
        first = np.r_[True, up[1:] != up[:-1]]
        up, values = up[first], values[first]
        lower = values < out[up]
        out[up[lower]] = values[lower]
        # A parent whose code did not drop has passed its lower one up already (or will).
        rows, values = up[lower], values[lower]
    return out


def gpu_codes(kind: pa.Array | pa.ChunkedArray, names: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """codes() for kernels; NONE for copies, sets and graph launches."""
    out = codes(names)
    is_kernel = np.asarray(
        pc.equal(one_chunk(kind).cast(pa.string()), "kernel").fill_null(False).to_numpy(zero_copy_only=False)
    )
    out[~is_kernel] = NONE
    return out
