#!/usr/bin/env bash
# Re-creates sample_db/autograd_thread_ranges.sqlite (scripts/workloads/autograd_thread.py) the way
# scripts/record/samples.sh records the others, then adds its SYNTHETIC GPU layer
# (scripts/record/autograd_gpu.py). See sample_db/README.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=sample_db
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
PYTHON=${PYTHON:-$(command -v python)}
IMPORTER=${QDSTRM_IMPORTER:-/usr/lib/nsight-systems/host-linux-x64/QdstrmImporter}

source scripts/record/nsys.sh

record autograd_thread_ranges nvtx,osrt "$PYTHON" -m scripts.workloads.autograd_thread
"$PYTHON" -m scripts.record.autograd_gpu "$OUT/autograd_thread_ranges.sqlite"
