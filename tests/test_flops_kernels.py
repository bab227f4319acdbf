"""The compute dtype kernel names carry (nvbridge.engine.costs.kernel_dtypes), on every real export's kernels
read by raw SQL: each class of names gets its class's dtype, and each op gets the dtype of the
kernels launched in its range, computed here from the raw rows."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

import cxxfilt
import numpy as np
import pytest

import nvbridge
from nvbridge.engine.costs.kernel_dtypes import DTYPES, NONE, name_code, subtree_min
from tests.conftest import NSYS_FILES, NVPROF_FILES, raw, real_db

NSYS_KERNELS = "SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName"
NVPROF_KERNELS = (
    "SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL k JOIN StringTable s ON s._id_ = k.name"
)

# The classes, each by its own pattern (first match wins) and the dtype it must give: the
# libraries' naming conventions, written out independently of the classifier's token rules.
CLASSES: list[tuple[str, str, str | None]] = [
    ("OpenMP offload and compiler-made kernels", r"^(__omp_offloading|nvkernel_)", None),
    ("NCCL", r"^ncclDevKernel_(?!.*_(bf16|f16|f32|f64)_)", None),
    ("cuDNN helpers without a type", r"computeOffsetsKernel", None),
    ("nvjet bfloat16 (t) operands", r"^nvjet_t", "bfloat16"),
    ("nvjet float16 (h) operands", r"^nvjet_h", "float16"),
    ("xmma / CUTLASS TF32", r"(xmma|cutlass).*tf32", "tf32"),
    ("cuBLAS single precision SIMT", r"^(maxwell|pascal|volta|turing|ampere)_sgemm_", "float32"),
    ("cuDNN single precision", r"^(maxwell|pascal|volta|turing|ampere)_scudnn_", "float32"),
    ("cuBLAS complex single (FFT convolution)", r"^(volta|turing|ampere)_gcgemm_", "float32"),
    ("CUTLASS SIMT single", r"cutlass_\d+_simt_sgemm", "float32"),
    ("flash attention, bfloat16 traits", r"flash.*cutlass::bfloat16_t", "bfloat16"),
    (
        "cuDNN templated on float",
        r"^void (cudnn::|fft2d|im2col4d|flip_filter|op_generic_tensor|deformable_im2col)[^(]*<float",
        "float32",
    ),
    (
        "cuBLAS gemv, gemm and split-K on float (float2: complex)",
        r"(gemv\w*|gemmSN_\w+|splitKreduce_kernel|internal::gemvx::kernel)"
        r"<(int, int, |\(int\)32, \(int\)16, int, )?float",
        "float32",
    ),
    ("cuBLAS pointer setup on float2", r"^compute_gemm_pointers\(float2", "float32"),
    ("torch on c10::Half / __half", r"(c10::Half|__half)", "float16"),
    ("torch on c10::BFloat16", r"(c10::BFloat16|bfloat16_copy_kernel)", "bfloat16"),
    (
        "torch / MXNet elementwise on bool or integers only",
        r"^(?!.*(?i:float|half|double)).*(<(bool|int|long long|long)[,>]|OpaqueType|"
        r"elementwise_kernel_with_index<int|fill_kernel_cuda|gather_kernel<\(int\)16, long long>|"
        r"kernelReduceAllPass|index_elementwise_kernel)",
        None,
    ),
    ("CUDA kernels templated on float", r"[<(]float[,>)]|<float2|\bfloat\b", "float32"),
]


def real_kernel_names() -> dict[str, list[str]]:
    out = {}
    for name in NSYS_FILES:
        out[name] = [str(v) for (v,) in raw(real_db(name), NSYS_KERNELS)]
    for name in NVPROF_FILES:
        names = [str(v) for (v,) in raw(real_db(name), NVPROF_KERNELS)]
        out[name] = [cxxfilt.demangle(n, external_only=False) if n.startswith("_Z") else n for n in names]
    return out


def dtype(code: int) -> str | None:
    return None if code == NONE else DTYPES[code % 8]


def test_every_real_kernel_name_gets_its_class_dtype() -> None:
    names = real_kernel_names()
    used: Counter[str] = Counter()
    unclassed = []
    for file, kernels in names.items():
        for kernel in kernels:
            for label, pattern, expected in CLASSES:
                if re.search(pattern, kernel):
                    assert dtype(name_code(kernel)) == expected, (file, label, kernel)
                    used[label] += 1
                    break
            else:
                unclassed.append((file, kernel))
    assert unclassed == []  # every real kernel name is in a class the test states
    assert set(used) == {label for label, _, _ in CLASSES}  # every class is met on real names
    assert sum(used.values()) >= 150


def test_library_kernels_spell_the_type_their_name_says() -> None:
    """Names the real exports do not have, one per family and precision: cuBLAS (per
    architecture), cuBLASLt nvjet and xmma, CUTLASS, cuDNN, flash and memory-efficient attention."""
    cases = {
        "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_nn": "bfloat16",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_"
        "kernel__5x_cublas": "bfloat16",
        "volta_h884gemm_64x64_ldg8_nn": "float16",
        "volta_s884gemm_fp16_128x128_ldg8_f2f_nn": "float16",
        "turing_fp16_s1688gemm_fp16_128x128_ldg8_f2f_nn": "float16",
        "cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8": "bfloat16",
        "sm80_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x32": "float16",
        "ampere_tf32_s1688gemm_tf32_128x128_ldg8_f2f_nn": "tf32",
        "cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align4": "tf32",
        "nvjet_sss_tf32_128x256_TNT": "tf32",
        "nvjet_qqtst_128x256_128x6_2x1_2cta_v_bz_TNT": "fp8",
        "nvjet_tss_256x128_64x4_1x2_h_bz_coopA_TNT": "bfloat16",
        "fmha_cutlassF_f16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::half_t, "
        "cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)": "float16",
        "fmha_cutlassB_bf16_aligned_64x64_k64_sm80": "bfloat16",
        "volta_dgemm_64x64_nn": "float64",
        "cutlass_80_tensorop_i16832gemm_s8_256x128_64x3_tn_align16": "int8",
        "volta_fp16_scudnn_fp16_128x128_stridedB_splitK_interior_nn": "float16",
        "cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_3_64x64x64_4x1x1_kernel0_0": "float16",
        "void cutlass::Kernel<cutlass_80_wmma_tensorop_f16_s161616gemm_f16_32x32_128x1_tn_align8>"
        "(T1::Params)": "float16",
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL": "bfloat16",
    }
    assert {name: dtype(name_code(name)) for name in cases} == cases


def test_subtree_min_takes_each_rows_lowest_descendant() -> None:
    rng = np.random.default_rng(7)
    for _ in range(50):
        n = int(rng.integers(1, 60))
        parent = np.array([-1] + [int(rng.integers(-1, i)) for i in range(1, n)])
        own = np.where(rng.random(n) < 0.4, rng.integers(0, 16, n), NONE).astype(np.uint8)
        expected = own.copy()
        for i in range(n):  # every row's code climbs its whole chain of parents
            up = parent[i]
            while up >= 0:
                expected[up] = min(expected[up], own[i])
                up = parent[up]
        assert subtree_min(parent, own).tolist() == expected.tolist()


def _kernel_dtype_by_range(path: Path) -> list[tuple[tuple[int, int, int], str, str | None]]:
    """Per closed push/pop range: ((start, end, thread), its text, the dtype of the kernels
    launched by the runtime calls inside it on its thread), from raw SQL and the class rules."""
    ranges = raw(
        path,
        "SELECT start, end, globalTid, coalesce(text, '') FROM NVTX_EVENTS WHERE eventType = 59 AND end IS NOT NULL",
    )
    launches = raw(
        path,
        """SELECT r.start, r.end, r.globalTid, s.value FROM CUPTI_ACTIVITY_KIND_RUNTIME r
        JOIN CUPTI_ACTIVITY_KIND_KERNEL k
          ON k.correlationId = r.correlationId AND (k.globalPid >> 24) = (r.globalTid >> 24)
        JOIN StringIds s ON s.id = k.demangledName""",
    )
    by_thread: dict[int, list[tuple[int, int, int]]] = {}
    codes = {name: name_code(name) for (_, _, _, name) in launches}
    for start, end, tid, name in launches:
        by_thread.setdefault(int(tid), []).append((int(start), int(end), codes[name]))
    out = []
    for start, end, tid, text in ranges:
        inside = [c for s, e, c in by_thread.get(int(tid), []) if s >= start and e <= end]
        out.append(((int(start), int(end), int(tid) & 0xFFFFFF), str(text), dtype(min(inside, default=NONE))))
    return out


KERNEL_FILES = [
    "nsys-2024.2-pyprof-markers.sqlite",
    "nsys-2026.2-pytorch2-fsdp-2gpu.sqlite",
    "nsys-2024.6-nvfuser-cpp-nvtx.sqlite",
    "nsys-2022.1-dlprof-torch-seq.sqlite",
    "nsys-2026.2-windows-cs336.sqlite",
]


@pytest.mark.parametrize("name", KERNEL_FILES)
def test_ops_without_recorded_dtypes_take_the_dtype_of_their_kernels(name: str) -> None:
    """Every closed op that records no dtype (and inherits none from a forward op) has the
    dtype of the kernels launched in its range, marked inferred; an op that records one keeps it."""
    path = real_db(name)
    expected = Counter((key, kernels) for key, _, kernels in _kernel_dtype_by_range(path))
    ops = nvbridge.load(path).df("ops")
    closed = ops[(ops["flags"] == 0) & (ops["style"] == "push_pop")]
    bare = closed[closed.input_dtypes.isna()]
    got = Counter(
        ((int(s), int(e), int(t)), d if inferred == True else None)  # noqa: E712 (null: not inferred)
        for s, e, t, d, inferred in zip(
            bare.start_ns, bare.end_ns, bare.thread_id, bare.compute_dtype, bare.dtype_inferred
        )
    )
    assert sum(got.values()) > 10
    assert not got - expected  # each such op's dtype is the one its range's kernels give
    assert sum(n for k, n in got.items() if k[1] is not None) >= 5
    recorded = closed[closed.input_dtypes.notna()]
    assert not (recorded.dtype_inferred == True).any()  # noqa: E712


def test_kernel_dtypes_agree_with_the_dtypes_pyprof_recorded() -> None:
    """Where a PyProf marker records its tensors' dtypes (raw text) and its range's kernels name
    one, they agree, but for float32 that ran as TF32 (cuDNN's default on Ampere)."""
    seen: Counter[tuple[str, str]] = Counter()
    for name in ("nsys-2024.2-pyprof-markers.sqlite", "nsys-2022.1-dlprof-torch-seq.sqlite"):
        for _, text, kernels in _kernel_dtype_by_range(real_db(name)):
            if not text.startswith("{'mod'") or kernels is None:
                continue
            args = ast.literal_eval(text).get("args", [])
            floating = [a["dtype"] for a in args if a.get("type") == "tensor" and "float" in str(a.get("dtype"))]
            if floating:
                seen[(floating[0], kernels)] += 1
    assert set(seen) <= {("float32", "float32"), ("float32", "tf32"), ("float16", "float16")}
    assert seen[("float32", "tf32")] > 0 and seen[("float32", "float32")] > 0
