#!/usr/bin/env bash
# What the tests need from the system beyond pip: Nsight Systems 2022.4 (NVIDIA's own reports are
# the tests' reference), SQLite's headers, which nvbridge's compiled reader (native/) builds
# against at `pip install`, and Debian's chromium with its chromedriver, the real browser the
# report page is tested in (tests/test_page_browser.py). Idempotent; needs root (or sudo).
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
if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
fi
test -x /usr/bin/chromium && test -x /usr/bin/chromedriver
