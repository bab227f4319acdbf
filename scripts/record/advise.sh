#!/usr/bin/env bash
# Re-creates the advise/diff recordings in sample_db/ (scripts/workloads/advise.py), the same way
# scripts/record/samples.sh records the others, then adds their SYNTHETIC GPU layers
# (scripts/record/advise_gpu.py). See sample_db/README.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=sample_db
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
PYTHON=${PYTHON:-$(command -v python)}
IMPORTER=${QDSTRM_IMPORTER:-/usr/lib/nsight-systems/host-linux-x64/QdstrmImporter}

source scripts/record/nsys.sh

for name in advise diff_base diff_extra ranks; do
  record "${name}_cpu" nvtx,osrt "$PYTHON" -m scripts.workloads.advise "$name"
  "$PYTHON" -m scripts.record.advise_gpu "$OUT/${name}_cpu.sqlite"
done
# The pinned-copies layer over the same CPU recording (copies dominate its GPU timeline).
"$PYTHON" -m scripts.record.copies_gpu "$OUT/diff_base_cpu.sqlite"
