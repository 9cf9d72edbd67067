#!/bin/bash
# gprobes QEMU lab: the guest kernel's vmlinux with the DWARF line tables,
# for file:line probes on --target kernel inside the guest (a kernel
# engineer's debug vmlinux, as `--symbols` takes it).
#
#   lab/qemulab/dbg-vmlinux.sh OUTDIR     prints the path of the file last
#
# OUTDIR is a build of build.sh (its BUILDINFO names the kernel). Debian
# ships the DWARF in linux-image-KVER-dbg (860 MB, a 630 MB vmlinux); the
# guest only needs what symbols.LineAddr reads: the ELF symbol table, the
# build-ID note and .debug_info/.debug_abbrev/.debug_str/.debug_line/
# .debug_line_str, and the tests' addr2line the units' address ranges
# (.debug_aranges, .debug_rnglists): 230 MB; location lists, frames and
# the relocation sections are left out (objcopy --only-keep-debug -R). The
# result is cached as $GPROBES_LAB/kernel/KVER/vmlinux-lines, checked to
# carry the same build ID as the lab's vmlinux; the .deb is deleted once
# the file is made.
set -euo pipefail
OUT=${1:?usage: $0 OUTDIR}
LAB=${GPROBES_LAB:-${HOME:-/root}/.cache/gprobes-qemulab}
log() { echo "qemulab: $*" >&2; }
die() { echo "qemulab: error: $*" >&2; exit 1; }
for c in objcopy readelf dpkg-deb tar apt-get flock; do
	command -v $c >/dev/null || die "$c is missing (binutils, dpkg, tar, apt, util-linux)"
done
KVER=$(sed -n 's/^KVER=//p' "$OUT/BUILDINFO")
KPV=$(sed -n 's/^KERNEL_PACKAGE=[^ ]* //p' "$OUT/BUILDINFO")
[ -n "$KVER" ] && [ -n "$KPV" ] || die "$OUT/BUILDINFO names no kernel"
K=$LAB/kernel/$KVER
F=$K/vmlinux-lines
buildid() { readelf -n "$1" | sed -n 's/^ *Build ID: *//p' | head -1; }
want=$(buildid "$OUT/vmlinux")
[ -n "$want" ] || die "$OUT/vmlinux has no build ID"
mkdir -p "$K"
exec 9>"$K/.dbg.lock"
flock 9
if [ -s "$F" ] && [ "$(buildid "$F")" = "$want" ]; then
	echo "$F"
	exit 0
fi
T=$(mktemp -d "$K/dbg.XXXXXX")
trap 'rm -rf "$T"' EXIT
PKG=linux-image-$KVER-dbg
log "apt-get download $PKG=$KPV (about 860 MB)"
if ! (cd "$T" && apt-get download -q -o APT::Sandbox::User=root "$PKG=$KPV" >&2); then
	[ "$(id -u)" = 0 ] && apt-get update -qq >&2 || true
	(cd "$T" && apt-get download -q -o APT::Sandbox::User=root "$PKG=$KPV" >&2) || die "apt-get download $PKG=$KPV failed"
fi
deb=$(ls "$T"/*.deb)
# the vmlinux comes early in the archive: tar stops at it
dpkg-deb --fsys-tarfile "$deb" 2>/dev/null | tar -x -C "$T" --occurrence=1 "./usr/lib/debug/boot/vmlinux-$KVER" || true
full=$T/usr/lib/debug/boot/vmlinux-$KVER
[ -s "$full" ] || die "$PKG has no usr/lib/debug/boot/vmlinux-$KVER"
rm -f "$deb"
got=$(buildid "$full")
[ "$got" = "$want" ] || die "$PKG's vmlinux has build ID $got, the lab's kernel $want"
objcopy --only-keep-debug -R '.rela*' -R .debug_loclists -R .debug_frame \
	"$full" "$T/lines"
readelf -S "$T/lines" | grep -q ' \.debug_line ' || die "the reduced vmlinux has no .debug_line"
mv "$T/lines" "$F"
log "$F: $(du -m "$F" | cut -f1) MB, build ID $want"
echo "$F"
