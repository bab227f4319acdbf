#!/usr/bin/env bash
# Re-creates sample_db/*.sqlite: real Nsight Systems recordings of small CPU training loops
# annotated by nvbridge.emit_nvtx (scripts/workloads/samples.py). See sample_db/README.md.
#
# Needs: nsys (scripts/install_nsys.sh; recorded with 2022.4.2.1), torch==2.13.0 (CPU),
# nvidia-nvtx-cu12 (the NVTX C library emit_nvtx calls through ctypes) or nvtx==0.2.11.
# On 2022.4 `nsys profile` often cannot find its importer; then QdstrmImporter turns the
# .qdstrm into .nsys-rep, and `nsys export` writes the SQLite database.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=sample_db
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
PYTHON=${PYTHON:-$(command -v python)}
IMPORTER=${QDSTRM_IMPORTER:-/usr/lib/nsight-systems/host-linux-x64/QdstrmImporter}
mkdir -p "$OUT"

source scripts/record/nsys.sh

for name in cnn transformer_shapes threads; do
  record "${name}_cpu" nvtx,osrt "$PYTHON" -m scripts.workloads.samples "$name"
done

# Workloads the C++ observer backend is checked on against torch.profiler (scripts/workloads/
# exact.py), recorded under emit_nvtx(backend="observer", record_shapes=True): torch's
# exact names plus fwd_tid. The observer is built into $HOME/.cache/nvbridge ($TMP here) first.
for name in function_copyslices two_threads dp_threads; do
  env -i PATH="$PATH" HOME="$TMP" LANG=C.UTF-8 "$PYTHON" -c \
    'from nvbridge.annotate import _observer; assert _observer.load(), _observer.unavailable_reason()'
  record "observer_${name}_cpu" nvtx,osrt "$PYTHON" -m scripts.workloads.samples exact "$name"
done

# The held-out FLOPs workload (scripts/workloads/flops.py) under the observer with
# record_shapes: dtypes and the arguments FLOP formulas need (values = [...]) in every name.
env -i PATH="$PATH" HOME="$TMP" LANG=C.UTF-8 "$PYTHON" -c \
  'from nvbridge.annotate import _observer; assert _observer.load(), _observer.unavailable_reason()'
record flops_cpu nvtx,osrt "$PYTHON" -m scripts.workloads.samples flops

# memory_cpu.sqlite: scripts/workloads/memory.py's CNN (3 steps) under emit_nvtx(profile_memory=True),
# observer backend: every allocation and free of torch's CPU allocator a `mem ...` mark in the
# `nvbridge` NVTX domain (docs/annotate.md, "Memory").
env -i PATH="$PATH" HOME="$TMP" LANG=C.UTF-8 "$PYTHON" -c \
  'from nvbridge.annotate import _observer; assert _observer.load(), _observer.unavailable_reason()'
record memory_cpu nvtx,osrt "$PYTHON" -m scripts.workloads.memory cnn nvbridge

# nvtx_domains.sqlite: NVTX domains through the C API (scripts/record/nvtx_domains.c): a "cuBLAS" domain
# with registered strings, an "NCCL" domain with inline text, beside default-domain ranges.
record_nvtx_domains() {
  local nvtx_include
  nvtx_include=$("$PYTHON" -c 'import nvidia.nvtx, os; print(os.path.join(nvidia.nvtx.__path__[0], "include"))')
  cc -O1 -I"$nvtx_include" scripts/record/nvtx_domains.c -o "$TMP/nvtx_domains" -ldl
  record nvtx_domains nvtx "$TMP/nvtx_domains"
}
record_nvtx_domains

# advise/diff recordings with planted problems (scripts/record/advise.sh)
bash scripts/record/advise.sh
