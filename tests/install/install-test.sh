#!/usr/bin/env bash
# What a user gets from `meson install` and from the .deb (meson suite 'install'):
#   install-test.sh CASE BUILD_DIR SOURCE_DIR VERSION
#
#   prefix    meson install into a temporary root: only public headers (each compiles on its own
#             with -std=c++20 and nothing but ferry.pc's flags), libferry.so.0, ferry.pc, every
#             command; examples/ built with `pkg-config --cflags --libs ferry` against it and run
#             over tcp (and ucx when available).
#   commands  every installed command answers --version with "<name> (Ferry) VERSION" and --help
#             with the shared man-style sections.
#   deb       scripts/make-deb.sh builds the package; dpkg installs it into an empty root; its
#             ferry-info runs, the example builds against the package's ferry.pc and runs.
# Exit 0 pass, 1 fail (every problem printed), 77 skip with the reason.
set -uo pipefail
readonly case_name=$1 build=$2 src=$3 version=$4

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)

# prefix_of ROOT: where ferry.pc was installed under ROOT (its libdir), or nothing.
pc_dir_of() { dirname "$(find "$1" -name ferry.pc -path '*/pkgconfig/*' | head -1)"; }

# build_and_run_example ROOT LIBDIR: builds examples/ with pkg-config pointed at ROOT only, runs it.
build_and_run_example() {
  local root=$1 pcdir=$2 libdir ex=$work/example-$RANDOM
  cp -r "$src/examples" "$ex"
  rm -f "$ex/sparse_write"
  export PKG_CONFIG_LIBDIR=$pcdir PKG_CONFIG_SYSROOT_DIR=$root
  local flags
  flags=$(pkg-config --cflags --libs ferry) || { fail "pkg-config --cflags --libs ferry (in $root)"; return; }
  case " $flags " in
    *" -I$root/"*" -L$root/"*) ok "pkg-config: $flags" ;;
    *) fail "pkg-config flags do not point into $root: $flags" ;;
  esac
  if ! make -s -C "$ex" >"$work/make.log" 2>&1; then
    fail "examples/ did not build against $root:"; sed 's/^/    /' "$work/make.log"
    unset PKG_CONFIG_LIBDIR PKG_CONFIG_SYSROOT_DIR
    return
  fi
  unset PKG_CONFIG_LIBDIR PKG_CONFIG_SYSROOT_DIR
  libdir=$(dirname "$(find "$root" -name 'libferry.so.0' | head -1)")
  # The example must load libferry from ROOT, not from anywhere else on this machine.
  if ! LD_LIBRARY_PATH=$libdir ldd "$ex/sparse_write" | grep -q "libferry.so.0 => $libdir/"; then
    fail "sparse_write does not resolve libferry.so.0 in $libdir"
  fi
  local backends=(tcp)
  if "$build/tools/info/ferry-info" --backend ucx --json 2>/dev/null | grep -q '"available": *true'; then
    backends+=(ucx)
  fi
  local b out
  for b in "${backends[@]}"; do
    if out=$(LD_LIBRARY_PATH=$libdir timeout 60 "$ex/sparse_write" "$b" 10000 64 2>&1); then
      ok "$out"
    else
      fail "sparse_write $b: $out"
    fi
  done
}

case $case_name in
  prefix)
    root=$work/root
    if ! meson install -C "$build" --no-rebuild --quiet --destdir "$root" >"$work/install.log" 2>&1; then
      fail "meson install"; sed 's/^/    /' "$work/install.log"; exit 1
    fi
    inc=$(find "$root" -type d -path '*/include/ferry' | head -1)
    [ -n "$inc" ] || { fail "no include/ferry directory installed"; exit 1; }
    for h in transport/transport.h transport/status.h ps/store/array_hash_map.h ps/worker/worker.h \
             ps/server/server.h models/train/trainer.h; do
      [ -f "$inc/$h" ] || fail "public header $h not installed"
    done
    # Backend headers stay private.
    private=$(cd "$inc" && find . -name '*.h' | grep -E '^\./transport/(tcp|ucx|verbs|fault)/|backend\.h$|handshake\.h$|wire_generated\.h$' || true)
    [ -z "$private" ] && ok "no backend header installed" || fail "private headers installed: $private"
    # Every installed header compiles alone with only ferry.pc's include path.
    n=0
    while IFS= read -r h; do
      rel=${h#"$inc"/}
      if ! echo "#include <$rel>" | g++ -std=c++20 -fsyntax-only -Wall -Wextra -Werror -I"$inc" \
           -x c++ - 2>"$work/hdr.err"; then
        fail "installed header $rel does not compile on its own:"; sed 's/^/    /' "$work/hdr.err" | head -20
      fi
      n=$((n + 1))
    done < <(find "$inc" -name '*.h' | sort)
    ok "$n installed headers each compile on their own"
    # An older -std is told why.
    if echo '#include <transport/transport.h>' | g++ -std=c++17 -fsyntax-only -I"$inc" -x c++ - \
         2>"$work/std.err"; then
      fail "transport.h compiled with -std=c++17"
    elif grep -q "need C++20" "$work/std.err"; then
      ok "-std=c++17 is refused with the reason"
    else
      fail "-std=c++17 error does not say C++20 is needed:"; head -5 "$work/std.err"
    fi
    [ -n "$(find "$root" -name 'libferry.so.0')" ] || fail "libferry.so.0 not installed"
    build_and_run_example "$root" "$(pc_dir_of "$root")"
    ;;

  commands)
    root=$work/root
    meson install -C "$build" --no-rebuild --quiet --destdir "$root" >/dev/null 2>&1 ||
      { fail "meson install"; exit 1; }
    bindir=$(dirname "$(find "$root" -name ferry-info -type f | head -1)")
    expected=(ferry-info ferry-lat ferry-bw ferry-plot ferry-ps-bench ferry-launch ferry-gen
              ferry-train ferry-predict ferry-vm ferry-rxe)
    installed=$(cd "$bindir" && ls | sort | tr '\n' ' ')
    for c in "${expected[@]}"; do
      [ -x "$bindir/$c" ] || { fail "$c not installed (installed: $installed)"; continue; }
      v=$("$bindir/$c" --version 2>&1)
      rc=$?
      [ "$rc" = 0 ] && [ "$v" = "$c (Ferry) $version" ] && ok "$v" ||
        fail "$c --version: exit $rc, printed '$v', want '$c (Ferry) $version'"
      help=$("$bindir/$c" --help 2>&1)
      sections=(NAME SYNOPSIS DESCRIPTION "SEE ALSO" VERSION)
      case $c in ferry-vm | ferry-rxe) sections+=(COMMANDS) ;; *) sections+=(OPTIONS EXAMPLES) ;; esac
      missing=()
      for s in "${sections[@]}"; do grep -qx "$s" <<<"$help" || missing+=("$s"); done
      grep -q "^    $c - \|^  $c - " <<<"$help" || missing+=("'$c - summary' under NAME")
      grep -q -- "--version" <<<"$help" || missing+=("--version in the help")
      ((${#missing[@]} == 0)) && ok "$c --help: man-style sections" ||
        fail "$c --help lacks: ${missing[*]}"
    done
    # Nothing else (test or benchmark binaries) lands in bin/.
    for f in $installed; do
      printf '%s\n' "${expected[@]}" | grep -qx "$f" || fail "unexpected file installed in bin/: $f"
    done
    ;;

  deb)
    command -v dpkg-shlibdeps >/dev/null || { echo "dpkg-dev not installed"; exit 77; }
    prefix=$(meson introspect --buildoptions "$build" |
             python3 -c 'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"]=="prefix"))')
    [ "$prefix" = /usr ] || { echo "build configured with prefix $prefix, packages need /usr"; exit 77; }
    if ! deb=$("$src/scripts/make-deb.sh" "$build" "$work/out" 2>"$work/deb.err"); then
      fail "make-deb.sh:"; sed 's/^/    /' "$work/deb.err"; exit 1
    fi
    ok "built $(basename "$deb") ($(du -k "$deb" | cut -f1) KiB)"
    dpkg-deb -I "$deb" >"$work/info" || fail "dpkg-deb -I"
    for dep in libucx0 libibverbs1 librdmacm1 libstdc++6; do
      grep -q "^ Depends:.*\b$dep\b" "$work/info" || fail "Depends lacks $dep: $(grep Depends "$work/info")"
    done
    # Every dependency is satisfied here (the tools are about to run on this machine).
    for p in $(sed -n 's/^ Depends: //p' "$work/info" | tr ',' '\n' | sed 's/(.*//; s/ //g'); do
      dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
        fail "dependency $p is not installed on this machine"
    done
    # A clean root: an empty dpkg database, nothing else. The package's own files only.
    root=$work/clean
    mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates" "$root/var/lib/dpkg/triggers"
    : >"$root/var/lib/dpkg/status"
    : >"$root/var/lib/dpkg/available"
    if ! dpkg --root="$root" --force-depends --force-not-root --log=/dev/null -i "$deb" \
         >"$work/dpkg.log" 2>&1; then
      fail "dpkg -i into a clean root:"; sed 's/^/    /' "$work/dpkg.log"; exit 1
    fi
    dpkg --root="$root" -s ferry 2>/dev/null | grep -q "^Status: install ok installed" &&
      ok "dpkg --root: ferry installed" || fail "dpkg does not record ferry as installed"
    if out=$("$root/usr/bin/ferry-info" 2>&1) && grep -q "tcp" <<<"$out"; then
      ok "ferry-info from the package runs ($(wc -l <<<"$out") lines)"
    else
      fail "ferry-info from the package: $out"
    fi
    [ -f "$root/usr/lib/$multiarch/pkgconfig/ferry.pc" ] || fail "ferry.pc not in the package"
    build_and_run_example "$root" "$root/usr/lib/$multiarch/pkgconfig"
    ;;
  *) echo "unknown case $case_name"; exit 2 ;;
esac
((fails == 0)) || { echo "$fails failure(s)"; exit 1; }
