#!/usr/bin/env bash
# Installs the Debian 12 packages Ferry needs, only those missing. Idempotent and silent when
# everything is present. Sourced by setup.sh and test.sh; callable on its own.
set -euo pipefail

FERRY_PACKAGES=(
  # build
  g++ meson ninja-build pkg-config
  # scripts (the reliability page, plots in the tests)
  python3
  # packaging (debian/: dpkg-buildpackage, the main stage's build; tests/install runs lintian
  # and builds examples/ with make)
  dpkg-dev debhelper lintian make
  # transports and services
  libibverbs-dev librdmacm-dev rdma-core libucx-dev ucx-utils libhwloc-dev libjemalloc-dev
  libflatbuffers-dev flatbuffers-compiler libssl-dev
  # tools, tests, benchmarks
  libcli11-dev nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev
  # ferry-serve's HTTP server and the serve tests' client
  libcpp-httplib-dev
  libabsl-dev robin-map-dev libxxhash-dev
  # network fault tests
  nftables iproute2
  # parameter server launchers (mpirun, single-node Slurm in the tests) and PMIx rendezvous
  openmpi-bin libpmix-dev slurm-wlm munge
  # training layer: gzip input, dense layers, the quality reference
  zlib1g-dev libeigen3-dev liblinear-tools
)
# The clang builds: the asan and fuzz stages of test.sh (tests/fuzz/run.sh).
FERRY_CLANG_PACKAGES=(clang libclang-rt-14-dev)

ferry_missing_packages() {
  local missing=() p
  for p in "$@"; do
    if ! grep -q "install ok installed" <<<"$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)"; then
      missing+=("$p")
    fi
  done
  echo "${missing[@]:-}"
}

ferry_install_packages() {
  local missing
  missing=$(ferry_missing_packages "$@")
  [ -z "$missing" ] && return 0
  echo "ferry: installing Debian packages: $missing" >&2
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq >&2
  # shellcheck disable=SC2086
  $sudo apt-get install -y -qq --no-install-recommends $missing >&2
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  ferry_install_packages "${FERRY_PACKAGES[@]}"
fi
