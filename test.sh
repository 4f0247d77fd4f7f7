#!/usr/bin/env bash
# Quick start, step 2: run the whole test suite (installing what is missing and building first).
# The 'rdma' suite boots a throwaway soft-RoCE VM (tools/softroce/ferry-vm) because this kernel
# may lack rdma_rxe; its packages and Debian's kernel are fetched here.
# Extra arguments go to `meson test` (e.g. ./test.sh --suite conformance).
set -euo pipefail
cd "$(dirname "$0")"
source scripts/deps.sh
ferry_install_packages "${FERRY_PACKAGES[@]}"
if [ -x tools/softroce/ferry-vm ]; then
  tools/softroce/ferry-vm setup
fi

BUILD=${FERRY_TEST_BUILD_DIR:-build-test}
if [ ! -f "$BUILD/build.ninja" ]; then
  meson setup "$BUILD" -Dwerror=true >/dev/null
fi
ninja -C "$BUILD"
meson test -C "$BUILD" --print-errorlogs "$@"
