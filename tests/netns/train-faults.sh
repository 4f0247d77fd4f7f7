#!/usr/bin/env bash
# Network faults on a training run: ferry-train over tcp with its two servers (rank 0 also the
# coordinator) in namespace A and its two workers in namespace B, joined by a veth pair with
# addresses from 198.18.0.0/15 that exist only inside the namespaces. Each case starts the four
# ranks by hand (FERRY_RANK/FERRY_SIZE/FERRY_COORDINATOR, as a launcher would), injects its fault
# mid-run and checks the rule:
#   loss (2 % of the packets each way), rate (a 20 mbit/s token bucket), each for 3 s
#       the job finishes, and its model file equals the fault-free run's byte for byte (bsp);
#   delay: the whole run with every worker connection (data and control) relayed by a user-space
#       proxy in the workers' namespace that holds each byte 2 ms and re-segments the streams
#       into random pieces of up to 1400 bytes (the kernel has no netem; an nftables nat rule
#       redirects the connections to netns_delay_proxy, which relays them to their original
#       destination): it finishes with the fault-free model bytes;
#   blackhole (nftables drops everything between A and B), linkdown (A's veth end down)
#       every rank fails with an error naming the lost peer within peer_timeout (4 s) + 5 s of
#       the fault; nothing hangs, nothing exits 0.
# Prints one RELIABILITY line per case (the format of tests/netns/harness.h), also appended to
# $FERRY_RELIABILITY_RESULTS when set (scripts/reliability-report.sh collects them).
#   train-faults.sh FERRY_TRAIN FERRY_GEN DELAY_PROXY   needs root, ip and nft (77 = skipped)
set -uo pipefail
train=$1 gen=$2 delay_proxy=$3
if [ "$(id -u)" != 0 ]; then echo "SKIP: needs root (network namespaces)"; exit 77; fi
for p in ip nft; do
  command -v "$p" >/dev/null || { echo "SKIP: needs $p (iproute2, nftables)"; exit 77; }
done

ns_a=ferry-trn-$$-a ns_b=ferry-trn-$$-b if_a=ftr$$a if_b=ftr$$b
addr_a=198.18.250.1 addr_b=198.18.250.2
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  ip netns del "$ns_a" 2>/dev/null
  ip netns del "$ns_b" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# Namespaces an earlier run left behind when it was SIGKILLed (its pid is gone).
for ns in $(ip netns list | awk '{print $1}' | grep '^ferry-trn-'); do
  pid=${ns#ferry-trn-}
  pid=${pid%%-*}
  kill -0 "$pid" 2>/dev/null || ip netns del "$ns" 2>/dev/null
done

fail=0
die() { echo "train-faults: $*"; exit 1; }
ip netns add "$ns_a" && ip netns add "$ns_b" || die "cannot create namespaces"
ip link add "$if_a" netns "$ns_a" type veth peer name "$if_b" netns "$ns_b" || die "no veth pair"
ip -n "$ns_a" addr add "$addr_a/30" dev "$if_a" && ip -n "$ns_b" addr add "$addr_b/30" dev "$if_b"
for s in a b; do
  ns=ns_$s ifn=if_$s
  ip -n "${!ns}" link set lo up && ip -n "${!ns}" link set "${!ifn}" up || die "links"
done

"$gen" --samples 60000 --test-samples 100 --features 20000 --out "$work/tr.svm" \
  --test-out "$work/te.svm" --seed 4 -q || die "ferry-gen failed"
job=(--transport tcp --model ftrl --train "$work/tr.svm" --consistency bsp --batch-size 64
  --epochs 2 --servers 2 --workers 2 --progress never -q)
"$train" "${job[@]}" --model-out "$work/ref.bin" >/dev/null || die "the fault-free local run failed"

now_ms() { date +%s%3N; }
port=$((20000 + $$ % 30000))

# run_case NAME FAULT_FN: starts the ranks, calls FAULT_FN once the job trains (after `delay_ms`),
# waits (60 s at most) and leaves exit codes in codes[], the fault time in fault_at and the last
# exit in last_exit.
run_case() {
  local name=$1 fault=$2 r ns host started
  pids=()
  codes=()
  port=$((port + 1))
  started=$(now_ms)
  for r in 0 1 2 3; do
    if [ "$r" -lt 2 ]; then ns=$ns_a host=$addr_a; else ns=$ns_b host=$addr_b; fi
    ip netns exec "$ns" env FERRY_RANK="$r" FERRY_SIZE=4 FERRY_COORDINATOR="$addr_a:$port" \
      FERRY_DATA_HOST="$host" "$train" "${job[@]}" --model-out "$work/$name.bin" \
      >"$work/$name.$r.log" 2>&1 &
    pids+=($!)
  done
  sleep "$delay"
  fault_at=$(now_ms)
  $fault
  # A transient fault ends after `window` seconds (loss stalls BSP's small messages on TCP's
  # retransmission timeouts: 5 % loss made a 2 s run last 55 s).
  if [ "$window" != 0 ]; then (sleep "$window" && clear_faults) & fi
  local left=4 deadline=$(($(now_ms) + 60000))
  last_exit=$fault_at
  while [ "$left" -gt 0 ] && [ "$(now_ms)" -lt "$deadline" ]; do
    left=0
    for r in 0 1 2 3; do
      [ -n "${codes[$r]:-}" ] && continue
      if kill -0 "${pids[$r]}" 2>/dev/null; then
        left=$((left + 1))
      else
        wait "${pids[$r]}"
        codes[$r]=$?
        last_exit=$(now_ms)
      fi
    done
    sleep 0.05
  done
  for r in 0 1 2 3; do
    if [ -z "${codes[$r]:-}" ]; then
      codes[$r]=hung
      kill -9 "${pids[$r]}" 2>/dev/null
    fi
  done
  pids=()
  run_ms=$((last_exit - started))
}

clear_faults() {
  for ns in "$ns_a" "$ns_b"; do ip netns exec "$ns" nft flush ruleset 2>/dev/null; done
  tc -n "$ns_a" qdisc del dev "$if_a" root 2>/dev/null
  tc -n "$ns_b" qdisc del dev "$if_b" root 2>/dev/null
  ip -n "$ns_a" link set "$if_a" up
}
fault_none() { :; }
fault_loss() {
  for s in a b; do
    local ns=ns_$s ifn=if_$s
    ip netns exec "${!ns}" nft "add table inet ferry; add chain inet ferry out { type filter hook output priority 0; }; add rule inet ferry out oifname \"${!ifn}\" numgen random mod 100 < 2 drop"
  done
}
fault_rate() {
  tc -n "$ns_a" qdisc add dev "$if_a" root tbf rate 20mbit burst 32kbit latency 400ms
  tc -n "$ns_b" qdisc add dev "$if_b" root tbf rate 20mbit burst 32kbit latency 400ms
}
fault_blackhole() {
  ip netns exec "$ns_a" nft "add table inet ferry; add chain inet ferry out { type filter hook output priority 0; }; add chain inet ferry in { type filter hook input priority 0; }; add rule inet ferry out ip daddr $addr_b drop; add rule inet ferry in ip saddr $addr_b drop"
}
fault_linkdown() { ip -n "$ns_a" link set "$if_a" down; }

report() {  # name outcome detect_ms elapsed_ms note error
  local line errors=1
  case $2 in ok | failed-in-bound) errors=0 ;; *) fail=1 ;; esac
  line="RELIABILITY scenario=train-$1 backend=tcp outcome=$2 ops=1 errors=$errors bytes=-"
  line+=" detect_ms=$3 drain_ms=- elapsed_ms=$4 proxy_bytes=- note=$5 error=$6"
  echo "$line"
  if [ -n "${FERRY_RELIABILITY_RESULTS:-}" ]; then echo "$line" >>"$FERRY_RELIABILITY_RESULTS"; fi
}

# The clean run over the veth pair first: its length places the faults mid-run.
delay=0 window=0
run_case clean fault_none
clean_ms=$run_ms
if [ "${codes[*]}" = "0 0 0 0" ] && cmp -s "$work/ref.bin" "$work/clean.bin"; then
  report clean ok - "$clean_ms" same-model-bytes -
else
  report clean wrong - "$clean_ms" "codes=$(IFS=,; echo "${codes[*]}")" \
    "model differs or a rank failed: $(tail -n3 "$work/clean.2.log" | tr '\n' ' ')"
fi
delay=$(awk -v ms="$clean_ms" 'BEGIN { printf "%.2f", ms * 0.4 / 1000 }')

for c in loss rate; do
  window=3
  run_case "$c" "fault_$c"
  wait  # the window's end
  clear_faults
  if [ "${codes[*]}" = "0 0 0 0" ] && cmp -s "$work/ref.bin" "$work/$c.bin"; then
    report "$c" ok - "$run_ms" "same-model-bytes,$(awk -v a="$run_ms" -v b="$clean_ms" \
      'BEGIN{printf "%.2f", a/b}')x-the-clean-run" -
  else
    report "$c" wrong - "$run_ms" "codes=$(IFS=,; echo "${codes[*]}")" \
      "$(tail -n2 "$work/$c.2.log" | tr '\n' ' ')"
  fi
done

# The delay case: the proxy and its nat rule are in place before the ranks start (connections are
# redirected when they are made) and stay for the whole run.
proxy_fifo=$work/proxy.stdin
mkfifo "$proxy_fifo"
ip netns exec "$ns_b" "$delay_proxy" 127.0.0.1 2 1400 <"$proxy_fifo" >"$work/proxy.out" 2>&1 &
proxy_pid=$!
exec {proxy_in}>"$proxy_fifo"
for _ in $(seq 100); do grep -q '^ready ' "$work/proxy.out" 2>/dev/null && break; sleep 0.05; done
proxy_port=$(sed -n 's/^ready .*:\([0-9]*\)$/\1/p' "$work/proxy.out")
if [ -z "$proxy_port" ]; then
  report delay setup - - - "the delay proxy did not start: $(head -c 200 "$work/proxy.out")"
else
  ip netns exec "$ns_b" nft "add table ip ferrynat; add chain ip ferrynat out { type nat hook output priority -100; }; add rule ip ferrynat out meta mark != 0x66 ip daddr $addr_a tcp dport != $proxy_port redirect to :$proxy_port"
  # Every batch waits for round trips through the relay: a shorter job than the others (1 epoch
  # of 15,000 samples: 4 ms more per round trip made the full job 30x slower).
  mid_run_delay=$delay full_job=("${job[@]}")
  "$gen" --samples 15000 --test-samples 100 --features 20000 --out "$work/small.svm" \
    --test-out "$work/small-te.svm" --seed 4 -q || die "ferry-gen failed"
  job=(--transport tcp --model ftrl --train "$work/small.svm" --consistency bsp --batch-size 64
    --epochs 1 --servers 2 --workers 2 --progress never -q)
  "$train" "${job[@]}" --model-out "$work/ref-small.bin" >/dev/null || die "the small local run failed"
  delay=0 window=0
  run_case delay fault_none
  delay=$mid_run_delay job=("${full_job[@]}")
  ip netns exec "$ns_b" nft delete table ip ferrynat
  exec {proxy_in}>&-
  wait "$proxy_pid"
  relayed=$(grep -o 'relayed [0-9]* connections' "$work/proxy.out" | grep -o '[0-9]*')
  if [ "${codes[*]}" = "0 0 0 0" ] && cmp -s "$work/ref-small.bin" "$work/delay.bin" &&
     [ "${relayed:-0}" -ge 4 ]; then
    report delay ok - "$run_ms" "same-model-bytes,${relayed}-connections-relayed" -
  else
    report delay wrong - "$run_ms" "codes=$(IFS=,; echo "${codes[*]}"),relayed=${relayed:-0}" \
      "$(tail -n2 "$work/delay.2.log" | tr '\n' ' ')"
  fi
fi

for c in blackhole linkdown; do
  window=0
  run_case "$c" "fault_$c"
  clear_faults
  detect_ms=$((last_exit - fault_at))
  named=1
  for r in 0 1 2 3; do
    grep -qiE "peer|did not respond|unreachable|failed" "$work/$c.$r.log" || named=0
  done
  note="codes=$(IFS=,; echo "${codes[*]}")"
  if [[ " ${codes[*]} " == *" 0 "* ]] || [[ " ${codes[*]} " == *hung* ]]; then
    report "$c" wrong "$detect_ms" "$run_ms" "$note" "a rank exited 0 or hung"
  elif [ "$detect_ms" -gt 10000 ]; then
    report "$c" late "$detect_ms" "$run_ms" "$note" "the last rank left after the bound"
  elif [ "$named" = 0 ]; then
    report "$c" unclear "$detect_ms" "$run_ms" "$note" "a rank's log names no failure"
  else
    report "$c" failed-in-bound "$detect_ms" "$run_ms" "$note" \
      "$(grep -hiE "peer|did not respond" "$work/$c.2.log" | head -n1)"
  fi
done
exit $fail
