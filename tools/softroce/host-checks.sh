#!/bin/bash
# Host-side checks of ferry-vm and ferry-rxe that boot nothing (meson suite 'tools').
#   host-checks.sh CASE FERRY_VM FERRY_RXE
# Exit 0 pass, 1 fail, 77 skip (meson's skip code) with the reason on stdout.
set -uo pipefail
readonly case_name=$1 vm=$2 rxe=$3

# Never touch a real cache: every case here must fail or finish before ferry-vm needs one.
export FERRY_VM_CACHE=/nonexistent/ferry-vm-host-checks

fails=0
err=$(mktemp)
trap 'rm -f "$err"' EXIT

# expect CODE PATTERN CMD... — CMD exits with CODE and its stdout+stderr matches PATTERN (grep -E).
expect() {
  local want=$1 pattern=$2
  shift 2
  local out got
  out=$("$@" 2>&1)
  got=$?
  if [[ $got != "$want" ]]; then
    echo "FAIL: '$*' exited $got, want $want; output:"
    printf '%s\n' "$out" | sed 's/^/    /'
    fails=$((fails + 1))
  elif ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL: '$*' output lacks /$pattern/; output:"
    printf '%s\n' "$out" | sed 's/^/    /'
    fails=$((fails + 1))
  else
    echo "ok: $* → $got"
  fi
}

case $case_name in
  vm_help)
    bash -n "$vm" || { echo "FAIL: bash -n $vm"; exit 1; }
    expect 0 'ferry-vm run \[OPTIONS\] -- COMMAND' "$vm" --help
    for word in --layout --mtu --timeout --mem --env --cwd --share --wait FERRY_VM_CACHE \
                FERRY_VM_ACCEL 'the VM failed to boot' 'timed out' 'never came up'; do
      expect 0 "$word" "$vm" --help
    done
    expect 125 'SYNOPSIS' "$vm"
    ;;
  vm_usage)
    expect 125 'unknown command' "$vm" frobnicate
    expect 125 'no command given' "$vm" run
    expect 125 'no command given' "$vm" run --layout veth --
    expect 125 'layout must be dummy or veth' "$vm" run --layout lo -- true
    expect 125 'mtu must be' "$vm" run --mtu 9x -- true
    expect 125 'timeout must be' "$vm" run --timeout 0 -- true
    expect 125 'mem must be' "$vm" run --mem 12 -- true
    expect 125 'env wants K=V' "$vm" run --env NOVALUE -- true
    expect 125 'is not a folder' "$vm" run --cwd /nonexistent/dir -- true
    expect 125 'share / is not allowed' "$vm" run --share / -- true
    expect 125 'unknown option' "$vm" run --bogus -- true
    expect 125 'layout needs a value' "$vm" run --layout
    expect 125 'shell takes no command' "$vm" shell -- true
    ;;
  rxe_usage)
    bash -n "$rxe" || { echo "FAIL: bash -n $rxe"; exit 1; }
    expect 0 'ferry-rxe up \[--netdev IF\]' "$rxe" --help
    expect 0 'ferry-vm' "$rxe" --help
    expect 2 'SYNOPSIS' "$rxe"
    expect 2 'unknown command' "$rxe" frobnicate
    expect 2 'not a device name' "$rxe" up --name 'a b'
    expect 2 'unknown option' "$rxe" down --bogus
    ;;
  rxe_no_module)
    # The clean failure on a kernel without rdma_rxe (this project's CI hosts). Where the kernel
    # has it, the module-missing path cannot be reached for real.
    kdir=/lib/modules/$(uname -r)
    if [[ -d /sys/module/rdma_rxe ]] ||
       [[ -d $kdir && -n $(find "$kdir" -name 'rdma_rxe.ko*' -print -quit 2>/dev/null) ]] ||
       grep -qs '/rdma_rxe\.ko' "$kdir/modules.builtin"; then
      echo "SKIP: this kernel ($(uname -r)) has rdma_rxe; the module-missing path is unreachable"
      exit 77
    fi
    msg='has no rdma_rxe module.*ferry-vm run -- COMMAND'
    expect 3 "$msg" "$rxe" up
    expect 3 "$msg" "$rxe" up --netdev lo --name rxe7
    expect 3 "$msg" "$rxe" status
    expect 3 "$msg" "$rxe" check
    expect 3 "$msg" "$rxe" down
    ;;
  *)
    echo "unknown case '$case_name'"
    exit 1
    ;;
esac
((fails == 0)) || { echo "$fails check(s) failed"; exit 1; }
