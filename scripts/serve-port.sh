#!/usr/bin/env bash
# Prints the port a ferry-serve started with `--listen 127.0.0.1:0` listens on, read from the
# line it logs once serving ("serving version V of DIR on http://127.0.0.1:PORT/v1/models/NAME").
#   scripts/serve-port.sh LOG [PID [SECONDS]]
# Waits up to SECONDS (default 30) for the line; with PID, stops waiting as soon as that process is
# gone. Exit 1, the log on stderr, when no port came.
set -euo pipefail
log=$1 pid=${2:-} seconds=${3:-30}
for _ in $(seq $((seconds * 10))); do
  port=$(sed -n 's#.*http://127\.0\.0\.1:\([0-9][0-9]*\)/v1/models/.*#\1#p' "$log" 2>/dev/null |
    head -1)
  if [ -n "$port" ]; then
    echo "$port"
    exit 0
  fi
  if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then break; fi
  sleep 0.1
done
cat "$log" >&2
echo "serve-port.sh: ferry-serve logged no port in $log" >&2
exit 1
