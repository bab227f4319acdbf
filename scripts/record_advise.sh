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

for name in advise diff_base diff_extra ranks; do
  rep="$TMP/${name}_cpu"
  env -i PATH="$PATH" HOME="$TMP" LANG=C.UTF-8 \
    nsys profile -t nvtx,osrt --sample=none --cpuctxsw=none \
      --osrt-threshold=100000 --osrt-backtrace-threshold=10000000000 \
      -f true -o "$rep" "$PYTHON" scripts/advise_workloads.py "$name" || true
  if [ ! -f "$rep.nsys-rep" ]; then
    "$IMPORTER" -i "$rep.qdstrm"
  fi
  rm -f "$OUT/${name}_cpu.sqlite"
  nsys export --type sqlite -o "$OUT/${name}_cpu.sqlite" "$rep.nsys-rep" >/dev/null
  "$PYTHON" scripts/advise_gpu.py "$OUT/${name}_cpu.sqlite"
done
