#!/usr/bin/env bash
# What a user gets from `meson install` and from the Debian packages (meson suite 'install'):
#   install-test.sh CASE BUILD_DIR SOURCE_DIR VERSION
#
#   prefix    meson install into a temporary root: only public headers (each compiles on its own
#             with -std=c++20 and nothing but ferry.pc's flags), libferry.so.0, ferry.pc, every
#             command; examples/ built with `pkg-config --cflags --libs ferry` against it and run
#             over tcp (and ucx when available).
#   commands  every installed command answers --version with "<name> (Ferry) VERSION" and --help
#             with the shared man-style sections, and has a man page with its whatis line.
#   deb       the packages test.sh's main stage built with dpkg-buildpackage (FERRY_DEB_DIR):
#             versions, the files each holds, Depends; dpkg installs all three into an empty
#             root; its ferry-info runs, the example builds against libferry-dev's ferry.pc and runs.
#   lintian   lintian over the same packages: no error, no warning.
# Exit 0 pass, 1 fail (every problem printed), 77 skip with the reason.
set -uo pipefail
# No `cmd | grep -q`: under pipefail grep -q quitting at its first match makes a cmd still
# writing die of SIGPIPE and the pipeline fail (a CI run failed on ldd's that way); the output
# is taken whole and searched (<<<).
readonly case_name=$1 build=$2 src=$3 version=$4

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)

# prefix_of ROOT: where ferry.pc was installed under ROOT (its libdir), or nothing.
pc_dir_of() { dirname "$(find "$1" -name ferry.pc -path '*/pkgconfig/*' | head -1)"; }

# built_changes: the .changes of the packages test.sh's main stage built (FERRY_DEB_DIR); without
# them it says why on stdout and fails (the caller skips: exit 77).
built_changes() {
  local c
  c=$(ls "${FERRY_DEB_DIR:-/nonexistent}"/ferry_*.changes 2>/dev/null | head -1)
  [ -n "$c" ] && echo "$c" && return 0
  echo "no packages built (FERRY_DEB_DIR='${FERRY_DEB_DIR:-}'): ./test.sh's main stage builds them" >&2
  return 1
}

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
  if ! grep -q "libferry.so.0 => $libdir/" <<<"$(LD_LIBRARY_PATH=$libdir ldd "$ex/sparse_write")"; then
    fail "sparse_write does not resolve libferry.so.0 in $libdir"
  fi
  local backends=(tcp)
  if grep -q '"available": *true' <<<"$("$build/tools/info/ferry-info" --backend ucx --json 2>/dev/null)"; then
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
    # Every installed header compiles alone with only ferry.pc's include path (one compiler per
    # core: each header's error output goes to its own file).
    n=$(cd "$inc" && find . -name '*.h' | sed 's|^\./||' | sort |
      tee "$work/headers.txt" | wc -l)
    mkdir "$work/hdr"
    # shellcheck disable=SC2016  # expanded by the inner shell
    xargs -P "$(nproc)" -I{} sh -c 'echo "#include <$1>" | g++ -std=c++20 -fsyntax-only -Wall \
      -Wextra -Werror -I"$2" -x c++ - 2>"$3/$(echo "$1" | tr / _).err" ||
      echo "$1" >"$3/$(echo "$1" | tr / _).failed"' sh {} "$inc" "$work/hdr" <"$work/headers.txt"
    for f in "$work"/hdr/*.failed; do
      [ -e "$f" ] || continue
      rel=$(cat "$f")
      fail "installed header $rel does not compile on its own:"; sed 's/^/    /' "${f%.failed}.err" | head -20
    done
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
              ferry-train ferry-predict ferry-serve ferry-vm ferry-rxe)
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
    # A man page per command (tools/man: from its --help), with the whatis line man-db indexes.
    mandir=$root/usr/share/man/man1
    for c in "${expected[@]}"; do
      if [ ! -f "$mandir/$c.1" ]; then
        fail "no man page $c.1 installed"
      elif ! grep -q "^${c//-/\\\\-} \\\\- ." "$mandir/$c.1"; then
        fail "$c.1 has no '$c \\- summary' NAME line: $(sed -n '3p' "$mandir/$c.1")"
      fi
    done
    [ -d "$mandir" ] && ok "man pages: $(ls "$mandir" | wc -l) in man1"
    # Nothing else (test or benchmark binaries) lands in bin/.
    for f in $installed; do
      grep -qx "$f" <<<"$(printf '%s\n' "${expected[@]}")" || fail "unexpected file installed in bin/: $f"
    done
    ;;

  deb)
    # The packages the main stage built (dpkg-buildpackage -b: scripts/test-stages.sh), from this
    # very build tree; FERRY_DEB_DIR holds them and their .changes.
    changes=$(built_changes) || exit 77
    dir=$(dirname "$changes")
    debver=$(sed -n 's/^Version: //p' "$changes")
    # The changelog's version and meson's are the same release (native package: no revision).
    [ "$debver" = "$version" ] && ok "package version $debver = meson project version" ||
      fail "debian/changelog says $debver, meson.build says $version"
    declare -A deb
    for p in ferry libferry0 libferry-dev; do
      deb[$p]=$(ls "$dir/${p}_${debver}_"*.deb 2>/dev/null | head -1)
      [ -n "${deb[$p]}" ] || { fail "no $p .deb in $dir"; exit 1; }
      dpkg-deb -c "${deb[$p]}" | awk '{print $6}' | sed 's|^\./|/|' >"$work/$p.files"
      dpkg-deb -I "${deb[$p]}" >"$work/$p.info"
    done
    ok "built: $(cd "$dir" && ls ./*.deb | sed 's|^\./||' | paste -sd ' ')"
    # What goes where (Debian's library policy): commands / the shared library / development files.
    expected=(ferry-info ferry-lat ferry-bw ferry-plot ferry-ps-bench ferry-launch ferry-gen
              ferry-train ferry-predict ferry-serve ferry-vm ferry-rxe)
    for c in "${expected[@]}"; do
      grep -qx "/usr/bin/$c" "$work/ferry.files" || fail "ferry lacks /usr/bin/$c"
      grep -qx "/usr/share/man/man1/$c.1.gz" "$work/ferry.files" || fail "ferry lacks the man page $c.1.gz"
    done
    grep -q "libferry\|/usr/include" "$work/ferry.files" && fail "ferry holds library or header files"
    grep -qx "/usr/lib/$multiarch/libferry.so.0" "$work/libferry0.files" &&
      grep -qx "/usr/lib/$multiarch/libferry.so.$version" "$work/libferry0.files" ||
      fail "libferry0 lacks libferry.so.0 -> libferry.so.$version"
    grep -q "/usr/include\|\.pc$\|libferry\.so$\|/usr/bin/" "$work/libferry0.files" &&
      fail "libferry0 holds development files or commands"
    grep -qx "/usr/lib/$multiarch/libferry.so" "$work/libferry-dev.files" &&
      grep -qx "/usr/lib/$multiarch/pkgconfig/ferry.pc" "$work/libferry-dev.files" &&
      grep -qx "/usr/include/ferry/transport/transport.h" "$work/libferry-dev.files" ||
      fail "libferry-dev lacks the .so link, ferry.pc or the headers"
    grep -q "libferry\.so\.0" "$work/libferry-dev.files" && fail "libferry-dev holds the shared library"
    ok "files split: $(grep -c . "$work/ferry.files") / $(grep -c . "$work/libferry0.files") / $(grep -c . "$work/libferry-dev.files") paths"
    # Depends: computed from what the ELF files link (dpkg-shlibdeps), the -dev pinned to its library.
    for dep in libucx0 libibverbs1 librdmacm1 libstdc++6; do
      grep -q "^ Depends:.*\b$dep\b" "$work/libferry0.info" || fail "libferry0 Depends lacks $dep: $(grep Depends "$work/libferry0.info")"
    done
    grep -q "^ Depends:.*libferry0 (= $debver)" "$work/libferry-dev.info" ||
      fail "libferry-dev does not depend on libferry0 (= $debver): $(grep Depends "$work/libferry-dev.info")"
    grep -q "^ Multi-Arch: same" "$work/libferry0.info" || fail "libferry0 is not Multi-Arch: same"
    # Every dependency is satisfied here (the tools are about to run on this machine).
    for p in $(sed -n 's/^ Depends: //p' "$work"/*.info | tr ',|' '\n\n' | sed 's/(.*//; s/ //g' |
               grep -v '^libferry' | sort -u); do
      grep -q "install ok installed" <<<"$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" ||
        fail "dependency $p is not installed on this machine"
    done
    # A clean root: an empty dpkg database, nothing else. The packages' own files only.
    root=$work/clean
    mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates" "$root/var/lib/dpkg/triggers"
    : >"$root/var/lib/dpkg/status"
    : >"$root/var/lib/dpkg/available"
    if ! dpkg --root="$root" --force-depends --force-not-root --force-script-chrootless \
         --log=/dev/null -i "${deb[libferry0]}" "${deb[libferry-dev]}" "${deb[ferry]}" \
         >"$work/dpkg.log" 2>&1; then
      fail "dpkg -i into a clean root:"; sed 's/^/    /' "$work/dpkg.log"; exit 1
    fi
    for p in ferry libferry0 libferry-dev; do
      grep -q "^Status: install ok installed" <<<"$(dpkg --root="$root" -s "$p" 2>/dev/null)" ||
        fail "dpkg does not record $p as installed"
    done
    ok "dpkg --root: ferry, libferry0, libferry-dev installed"
    if out=$("$root/usr/bin/ferry-info" 2>&1) && grep -q "tcp" <<<"$out"; then
      ok "ferry-info from the package runs ($(wc -l <<<"$out") lines)"
    else
      fail "ferry-info from the package: $out"
    fi
    build_and_run_example "$root" "$root/usr/lib/$multiarch/pkgconfig"
    ;;

  lintian)
    # Debian's package checker over what dpkg-buildpackage built: no error and no warning
    # (Debian 12's lintian; info-level tags are listed, they do not fail).
    changes=$(built_changes) || exit 77
    command -v lintian >/dev/null || { fail "lintian not installed (scripts/deps.sh installs it)"; exit 1; }
    lintian --fail-on error,warning --display-level '>=info' "$changes" >"$work/lintian.txt" 2>&1
    rc=$?
    sed 's/^/    /' "$work/lintian.txt"
    errors=$(grep -c '^E: ' "$work/lintian.txt")
    warnings=$(grep -c '^W: ' "$work/lintian.txt")
    infos=$(grep -c '^I: ' "$work/lintian.txt")
    if [ "$rc" = 0 ] && [ "$errors" = 0 ] && [ "$warnings" = 0 ]; then
      ok "lintian $(basename "$changes"): 0 errors, 0 warnings ($infos info tags)"
    else
      fail "lintian $(basename "$changes"): exit $rc, $errors errors, $warnings warnings"
    fi
    ;;
  *) echo "unknown case $case_name"; exit 2 ;;
esac
((fails == 0)) || { echo "$fails failure(s)"; exit 1; }
