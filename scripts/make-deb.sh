#!/usr/bin/env bash
# Builds ferry_<version>_<arch>.deb from a configured and BUILT meson tree:
#
#   meson setup build-rel --buildtype=release --prefix=/usr && ninja -C build-rel
#   scripts/make-deb.sh build-rel OUTDIR
#
# Meson's own install is the packaging path (no second build): `meson install --destdir` into a
# staging root, stripped; dpkg-shlibdeps computes Depends from the ELF files' NEEDED libraries
# (so the package asks for exactly the runtime libraries it links: libucx0, libibverbs1, ...), and
# `dpkg-deb --root-owner-group` builds the archive. One binary package, "ferry": tools under
# /usr/bin, libferry.so.0 and its development files (headers, ferry.pc, the .so link). The tree
# must be configured with --prefix=/usr (Debian's layout); anything else is refused.
#
# Prints the path of the .deb on stdout. Needs dpkg-dev (dpkg-shlibdeps).
set -euo pipefail

die() { echo "make-deb: $*" >&2; exit 1; }
(($# == 2)) || die "usage: make-deb.sh BUILD_DIR OUT_DIR"
build=$(realpath "$1")
out=$2
[ -f "$build/build.ninja" ] || die "$build is not a meson build directory"
command -v dpkg-shlibdeps >/dev/null || die "dpkg-shlibdeps not found: apt-get install dpkg-dev"

info=$(meson introspect --projectinfo --buildoptions "$build" 2>/dev/null) ||
  die "meson introspect failed on $build"
read -r version prefix < <(python3 -c '
import json, sys
doc = json.load(sys.stdin)
proj, opts = doc["projectinfo"], doc["buildoptions"]
prefix = next(o["value"] for o in opts if o["name"] == "prefix")
print(proj["version"], prefix)' <<<"$info") || die "cannot read the version and prefix of $build"
[ "$prefix" = /usr ] ||
  die "$build is configured with prefix $prefix; a package needs /usr (meson configure $build -Dprefix=/usr)"
arch=$(dpkg --print-architecture)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/root
meson install -C "$build" --no-rebuild --quiet --strip --destdir "$root" >/dev/null ||
  die "meson install failed"

# dpkg-shlibdeps wants a source-package layout (debian/control); give it a minimal one.
mkdir -p "$work/src/debian"
printf 'Source: ferry\n\nPackage: ferry\nArchitecture: any\n' >"$work/src/debian/control"
mapfile -t elves < <(find "$root" -type f \( -perm -u+x -o -name '*.so*' \) -exec sh -c \
  'head -c4 "$1" | grep -q "ELF" && echo "$1"' _ {} \;)
((${#elves[@]} > 0)) || die "no ELF files were installed from $build"
depends=$(cd "$work/src" && dpkg-shlibdeps -O -l"$root/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH)" \
  "${elves[@]}" 2>"$work/shlibdeps.err" | sed -n 's/^shlibs:Depends=//p') ||
  { cat "$work/shlibdeps.err" >&2; die "dpkg-shlibdeps failed"; }
[ -n "$depends" ] || { cat "$work/shlibdeps.err" >&2; die "dpkg-shlibdeps found no dependencies"; }

size_kb=$(du -sk "$root" | cut -f1)
mkdir -p "$root/DEBIAN" "$root/usr/share/doc/ferry"
src=$(cd "$(dirname "$0")/.." && pwd)
cp "$src/README.md" "$root/usr/share/doc/ferry/README.md"
cat >"$root/DEBIAN/control" <<EOF
Package: ferry
Version: $version
Architecture: $arch
Maintainer: Ferry developers <ferry@localhost>
Installed-Size: $size_kb
Depends: $depends
Recommends: rdma-core, ibverbs-providers, ucx-utils
Section: net
Priority: optional
Description: RDMA/UCX/TCP communication runtime and parameter server
 Ferry moves dense and sparse (scatter-gather) data zero-copy over verbs (RC queue pairs),
 UCX and TCP behind one small transport interface, and runs a parameter server with
 LR, FTRL-Proximal, FM and embedding-MLP training on top.
 .
 Tools: ferry-info, ferry-lat, ferry-bw, ferry-plot, ferry-ps-bench, ferry-launch, ferry-gen,
 ferry-train, ferry-predict, ferry-vm, ferry-rxe. Library: libferry.so.0 with its headers
 under /usr/include/ferry and pkg-config file ferry.pc.
EOF
# Shared library in a standard directory: the trigger that runs ldconfig on install and removal.
echo "activate-noawait ldconfig" >"$root/DEBIAN/triggers"

mkdir -p "$out"
deb="$out/ferry_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz -z6 --build "$root" "$deb" >/dev/null || die "dpkg-deb failed"
realpath "$deb"
