# shellcheck shell=bash
# shellcheck disable=SC2034  # LAUNCH_* are read by the sourcing driver
# Shared by the launch drivers (sourced, not run). Parses
#   NUM [--expect REGEX]... [--timeout SECONDS] [driver options] -- CMD ARGS...
# into LAUNCH_N, LAUNCH_EXPECT (array), LAUNCH_TIMEOUT, LAUNCH_CMD (array); a driver option
# --name VALUE is handed to the driver's launch_option function (return 1 if unknown).
# Exit codes of every driver: 0 pass, 1 fail, 77 skip (the launcher is missing or cannot start).

launch_usage() {
  echo "usage: $(basename "$0") NUM [--expect REGEX]... [--timeout SECONDS] $LAUNCH_EXTRA_USAGE-- CMD ARGS..." >&2
  exit 2
}

launch_parse() {
  LAUNCH_EXPECT=()
  LAUNCH_TIMEOUT=120
  [[ $# -ge 1 && $1 =~ ^[1-9][0-9]*$ ]] || launch_usage
  LAUNCH_N=$1
  shift
  while [[ $# -gt 0 && $1 != -- ]]; do
    case $1 in
      --expect) [[ $# -ge 2 ]] || launch_usage; LAUNCH_EXPECT+=("$2"); shift 2 ;;
      --timeout) [[ $# -ge 2 && $2 =~ ^[1-9][0-9]*$ ]] || launch_usage; LAUNCH_TIMEOUT=$2; shift 2 ;;
      *)
        [[ $# -ge 2 ]] || launch_usage
        if ! declare -F launch_option >/dev/null || ! launch_option "$1" "$2"; then launch_usage; fi
        shift 2 ;;
    esac
  done
  [[ $# -ge 2 && $1 == -- ]] || launch_usage
  shift
  LAUNCH_CMD=("$@")
}

# launch_run LOG CMD ARGS...: runs CMD under `timeout --foreground` (so a SIGTERM that meson
# sends to the test's process group reaches the launcher too), its output to stdout and LOG.
# The pipeline runs in the background and is waited for, so a trapped SIGTERM/SIGINT is handled
# at once rather than when the launch ends. Sets LAUNCH_STATUS to CMD's exit status.
launch_run() {
  local log=$1
  shift
  (timeout --foreground -k 10 "$LAUNCH_TIMEOUT" "$@" 2>&1 | tee "$log"; exit "${PIPESTATUS[0]}") &
  wait $!
  LAUNCH_STATUS=$?
}

# launch_check LOG STATUS: prints the verdict; returns 0 when STATUS is 0 and every --expect regex
# matches a line of LOG.
launch_check() {
  local log=$1 status=$2 re ok=0
  if [[ $status -ne 0 ]]; then
    [[ $status -eq 124 || $status -eq 137 ]] && echo "FAIL: timed out after ${LAUNCH_TIMEOUT} s" >&2
    echo "FAIL: the launch exited with status $status" >&2
    ok=1
  fi
  for re in "${LAUNCH_EXPECT[@]}"; do
    if ! grep -Eq -- "$re" "$log"; then
      echo "FAIL: no output line matches /$re/" >&2
      ok=1
    fi
  done
  [[ $ok -eq 0 ]] && echo "PASS: $(basename "$0") ${LAUNCH_CMD[0]##*/}"
  return $ok
}
