#!/usr/bin/env bash
# Re-creates the advise/diff recordings in sample_db/ (scripts/advise_workloads.py), the same way
# scripts/record_samples.sh records the others, then adds their SYNTHETIC GPU layers
# (scripts/advise_gpu.py). See sample_db/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=sample_db
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
PYTHON=${PYTHON:-$(command -v python)}
IMPORTER=${QDSTRM_IMPORTER:-/usr/lib/nsight-systems/host-linux-x64/QdstrmImporter}

source scripts/_record.sh

for name in advise diff_base diff_extra ranks; do
  record "${name}_cpu" nvtx,osrt "$PYTHON" scripts/advise_workloads.py "$name"
  "$PYTHON" scripts/advise_gpu.py "$OUT/${name}_cpu.sqlite"
done
# The pinned-copies layer over the same CPU recording (copies dominate its GPU timeline).
"$PYTHON" scripts/copies_gpu.py "$OUT/diff_base_cpu.sqlite"
