#!/usr/bin/env bash
# Installs Nsight Systems 2022.4 (the CLI `nsys`) from Debian's non-free component.
# It records NVTX on a CPU-only machine and ships NVIDIA's own `nsys stats` reports,
# which the tests use as an independent reference. Idempotent; needs root (or sudo).
set -euo pipefail
if command -v nsys >/dev/null 2>&1; then
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
src=/etc/apt/sources.list.d/debian.sources
if [ -f "$src" ] && ! grep -q "non-free" "$src"; then
  $SUDO sed -i 's/^Components: main$/Components: main contrib non-free/' "$src"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends nsight-systems nsight-systems-target >/dev/null
command -v nsys >/dev/null
