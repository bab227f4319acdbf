#!/usr/bin/env bash
# Re-creates sample_db/autograd_thread_ranges.sqlite (scripts/autograd_thread_workload.py) the way
# scripts/record_samples.sh records the others, then adds its SYNTHETIC GPU layer
# (scripts/autograd_gpu.py). See sample_db/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=sample_db
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
PYTHON=${PYTHON:-$(command -v python)}
IMPORTER=${QDSTRM_IMPORTER:-/usr/lib/nsight-systems/host-linux-x64/QdstrmImporter}

source scripts/_record.sh

record autograd_thread_ranges nvtx,osrt "$PYTHON" scripts/autograd_thread_workload.py
"$PYTHON" scripts/autograd_gpu.py "$OUT/autograd_thread_ranges.sqlite"
