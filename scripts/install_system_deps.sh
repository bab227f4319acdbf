#!/usr/bin/env bash
# What the tests need from the system beyond pip: Nsight Systems 2022.4 (NVIDIA's own reports are
# the tests' reference) and SQLite's headers, which nvbridge's compiled reader (native/) builds
# against at `pip install`. Idempotent; needs root (or sudo).
set -euo pipefail
bash "$(dirname "$0")/install_nsys.sh"
if [ ! -f /usr/include/sqlite3.h ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends libsqlite3-dev gcc >/dev/null
fi
test -f /usr/include/sqlite3.h
