#!/bin/bash
# gprobes QEMU lab: build the guest (a Debian kernel + a busybox initramfs with
# the gpwork workload) from Debian packages, without installing a kernel.
#
#   lab/qemulab/build.sh           build (or reuse) the artifacts; prints the out dir last
#   lab/qemulab/build.sh --deps    only install the host packages the lab needs (root)
#   lab/qemulab/build.sh --check   only report missing host tools (exit 1 if any)
#
# Environment:
#   GPROBES_LAB    cache folder (default $HOME/.cache/gprobes-qemulab)
#   GPROBES_KVER   Debian kernel ABI, e.g. 6.1.0-56-amd64 (default below);
#                  "latest" = the newest linux-image-6.1.0-*-amd64 apt-cache lists
#
# Layout of $GPROBES_LAB:
#   debs/                      downloaded .deb files (apt-get download)
#   kernel/<KVER>/             vmlinuz, config, vmlinux (ELF from the vmlinuz), System.map,
#                              modules/ (the few .ko of $MODULES, below)
#   out-<hash>/                one build: bzImage System.map config vmlinux
#                              initramfs.cpio.gz gpwork minix.img BUILDINFO
#   out -> out-<hash>          the current build
# Idempotent: a second run with the same inputs does nothing. Concurrent runs
# serialize on $GPROBES_LAB/.lock.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
LAB=${GPROBES_LAB:-${HOME:-/root}/.cache/gprobes-qemulab}
# Newest 6.1 ABI in bookworm(-security) when this was written. When the
# mirror drops it, bump it here or run with GPROBES_KVER=latest.
KVER_DEFAULT=6.1.0-56-amd64
KVER=${GPROBES_KVER:-$KVER_DEFAULT}
# The kernel modules of the package put in the guest (/lib/modules/KVER), for
# tests of module probes: none needs hardware, each loads, is exercised with
# an exact number of calls from user space and unloads (docs/qemu-lab.md).
# The .deb's modules are uncompressed (CONFIG_MODULE_COMPRESS_NONE); every
# dependency must be in the list (checked below).
MODULES="drivers/net/dummy.ko drivers/block/loop.ko fs/minix/minix.ko
	crypto/af_alg.ko crypto/algif_hash.ko crypto/rmd160.ko"

# Host packages, and the commands that prove each one is there.
PKGS="qemu-system-x86 cpio gzip xz-utils zstd gcc libc6-dev binutils util-linux coreutils"
declare -A CMD_PKG=(
	[qemu-system-x86_64]=qemu-system-x86 [cpio]=cpio [gzip]=gzip [xz]=xz-utils
	[zstd]=zstd [gcc]=gcc [readelf]=binutils [flock]=util-linux [od]=coreutils
	[sha256sum]=coreutils [apt-get]=apt [dpkg-deb]=dpkg [mkfs.minix]=util-linux
)

NAME=qemulab
# the host tools, --deps and --check, the lock, fetch: shared with the other lab
source "$HERE/../labkit/lab.sh"

# ---- inputs ------------------------------------------------------------
list_kvers() {
	apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]+-amd64$' 2>/dev/null |
		awk '{print $1}' | sed 's/^linux-image-//' | sort -V
}
if [ "$KVER" = latest ]; then
	pkg_known linux-image-$KVER_DEFAULT || apt_update || true
	KVER=$(list_kvers | tail -1)
	[ -n "$KVER" ] || die "apt-cache lists no linux-image-6.1.0-*-amd64 (apt-get update? is bookworm in sources.list?)"
	log "GPROBES_KVER=latest -> $KVER"
fi
[[ $KVER =~ ^[0-9][0-9.]*-[0-9]+-amd64$ ]] || die "GPROBES_KVER=$KVER does not look like 6.1.0-NN-amd64"
KPKG=linux-image-$KVER
if [ ! -e "$LAB/kernel/$KVER/.done" ] && ! pkg_known "$KPKG"; then
	apt_update || true
	pkg_known "$KPKG" || die "the Debian mirror does not have $KPKG.
  Available: $(list_kvers | tr '\n' ' ')
  Set GPROBES_KVER to one of them (or GPROBES_KVER=latest), or bump KVER_DEFAULT in $0."
fi

# ---- kernel: once per KVER --------------------------------------------
K=$LAB/kernel/$KVER
BB_DEB=$(fetch busybox-static)
BB=$LAB/debs/busybox-root
if [ ! -e "$BB/.done" ] || [ "$(cat "$BB/.done")" != "$(basename "$BB_DEB")" ]; then
	rm -rf "$BB" && mkdir -p "$BB"
	dpkg-deb -x "$BB_DEB" "$BB"
	basename "$BB_DEB" >"$BB/.done"
fi
[ -x "$BB/bin/busybox" ] || die "busybox-static has no bin/busybox"

# readelf -SW without the "[Nr]" column: name type address offset size ...
sections() { readelf -SW "$1" | sed -n 's/^ *\[ *[0-9]*\] *//p'; }

make_initramfs() { # make_initramfs ROOTDIR OUTFILE [gpwork [modules-dir minix.img]]
	local R=$1
	rm -rf "$R" && mkdir -p "$R"/{bin,sbin,etc,proc,sys,dev,tmp,root,run,mnt}
	cp "$BB/bin/busybox" "$R/bin/busybox"
	install -m 755 "$HERE/src/init" "$R/init"
	install -m 755 "$HERE/../labkit/waitfor" "$R/bin/waitfor"
	[ -n "${3:-}" ] && install -m 755 "$3" "$R/bin/gpwork"
	if [ -n "${4:-}" ]; then
		mkdir -p "$R/lib/modules/$KVER" "$R/lib/gplab"
		cp -a "$4/." "$R/lib/modules/$KVER/"
		# modules.dep and modules.alias for busybox modprobe
		"$BB/bin/busybox" depmod -b "$R" "$KVER"
		cp "$5" "$R/lib/gplab/minix.img"
	fi
	printf 'gprobes lab file a\n' >"$R/etc/gp-a"
	printf 'gprobes lab file b\n' >"$R/etc/gp-b"
	printf 'root:x:0:0:root:/root:/bin/sh\n' >"$R/etc/passwd"
	printf 'root:x:0:\n' >"$R/etc/group"
	# /dev/console for the kernel's first open (the built-in initramfs has one
	# too; /init mounts devtmpfs over /dev anyway)
	[ "$(id -u)" = 0 ] && mknod -m 600 "$R/dev/console" c 5 1
	(cd "$R" && find . | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet | gzip -6n) >"$2"
}

if [ ! -e "$K/.done" ]; then
	KDEB=$(fetch "$KPKG")
	log "extracting ./boot of $(basename "$KDEB")"
	rm -rf "$K" "$K.tmp" && mkdir -p "$K.tmp/root"
	# only ./boot: the modules (~400 MB unpacked) are not needed
	dpkg-deb --fsys-tarfile "$KDEB" | tar -x -C "$K.tmp/root" ./boot
	cp "$K.tmp/root/boot/vmlinuz-$KVER" "$K.tmp/vmlinuz"
	cp "$K.tmp/root/boot/config-$KVER" "$K.tmp/config"
	dpkg-deb -f "$KDEB" Version >"$K.tmp/package-version"
	"$HERE/extract-vmlinux.sh" "$K.tmp/vmlinuz" "$K.tmp/vmlinux" 2>"$K.tmp/extract.log" ||
		{ cat "$K.tmp/extract.log" >&2; die "could not extract vmlinux from vmlinuz-$KVER"; }
	cat "$K.tmp/extract.log" >&2
	sed -n 's/^extract-vmlinux: \([a-z0-9]*\) payload.*/\1/p' "$K.tmp/extract.log" | head -1 >"$K.tmp/compression"
	readelf -S "$K.tmp/vmlinux" | grep -q ' \.BTF ' || die "vmlinux extracted from vmlinuz-$KVER has no .BTF section"

	# Debian's boot/System.map is a one-line placeholder (the real one is in the
	# ~860 MB -dbg package). Make one from the kernel itself: boot it once with
	# nokaslr and copy /proc/kallsyms (CONFIG_KALLSYMS_ALL=y) out over ttyS1.
	if [ "$(wc -l <"$K.tmp/root/boot/System.map-$KVER")" -gt 1000 ]; then
		cp "$K.tmp/root/boot/System.map-$KVER" "$K.tmp/System.map"
		echo debian >"$K.tmp/System.map.source"
	else
		log "booting $KVER once (nokaslr) to read /proc/kallsyms for System.map"
		make_initramfs "$K.tmp/symrd" "$K.tmp/symrd.cpio.gz"
		timeout 300 qemu-system-x86_64 -accel tcg -m 512M -smp 1 -nodefaults -no-user-config \
			-display none -no-reboot -kernel "$K.tmp/vmlinuz" -initrd "$K.tmp/symrd.cpio.gz" \
			-append "console=ttyS0 nokaslr quiet panic=-1 no_timer_check gplab.dumpsyms" \
			-serial "file:$K.tmp/symboot.log" -serial "file:$K.tmp/kallsyms" </dev/null >&2 ||
			{ tail -30 "$K.tmp/symboot.log" >&2; die "kallsyms boot failed"; }
		want=$(sed -n 's/^GPLAB SYMS \([0-9]*\).*/\1/p' "$K.tmp/symboot.log" | head -1)
		got=$(wc -l <"$K.tmp/kallsyms")
		[ -n "$want" ] && [ "$want" = "$got" ] ||
			{ tail -30 "$K.tmp/symboot.log" >&2; die "kallsyms dump incomplete: $got lines, guest said ${want:-?}"; }
		# core kernel symbols only (no "[module]" column), sorted like nm -n
		awk 'NF == 3' "$K.tmp/kallsyms" | LC_ALL=C sort -s -k1,1 >"$K.tmp/System.map"
		echo "kallsyms of a nokaslr boot" >"$K.tmp/System.map.source"
		rm -rf "$K.tmp/symrd" "$K.tmp/symrd.cpio.gz" "$K.tmp/kallsyms"
	fi
	# sanity: the map's _stext is the ELF's .text address, linux_banner reads "Linux version"
	text=$(sections "$K.tmp/vmlinux" | awk '$1 == ".text" {print $3}')
	stext=$(awk '$3 == "_stext" {print $1}' "$K.tmp/System.map")
	[ -n "$stext" ] && [ "$stext" = "$text" ] || die "System.map _stext=$stext but vmlinux .text=$text"
	rm -rf "$K.tmp/root"
	touch "$K.tmp/.done"
	mv "$K.tmp" "$K"
fi

# ---- the modules of $MODULES: once per KVER and list --------------------
MODLIST=$(echo $MODULES)
if [ ! -e "$K/modules/.done" ] || [ "$(cat "$K/modules/.done")" != "$MODLIST" ]; then
	KDEB=$(fetch "$KPKG")
	log "extracting $MODLIST from $(basename "$KDEB")"
	rm -rf "$K/modules" "$K/modules.tmp" && mkdir -p "$K/modules.tmp/root"
	members="./lib/modules/$KVER/modules.builtin ./lib/modules/$KVER/modules.order"
	for m in $MODULES; do members="$members ./lib/modules/$KVER/kernel/$m"; done
	dpkg-deb --fsys-tarfile "$KDEB" | tar -x -C "$K/modules.tmp/root" $members ||
		die "$KPKG lacks one of: $members"
	mv "$K/modules.tmp/root/lib/modules/$KVER" "$K/modules.tmp/tree"
	# every dependency of a listed module must be listed too
	for m in $MODULES; do
		for d in $(readelf -p .modinfo "$K/modules.tmp/tree/kernel/$m" |
			sed -n 's/.*\]  depends=//p' | tr ',' ' '); do
			case " $MODLIST " in
			*/$d.ko\ *) ;;
			*) die "module $m depends on $d, which is not in MODULES (build.sh)" ;;
			esac
		done
	done
	mv "$K/modules.tmp/tree" "$K/modules"
	rm -rf "$K/modules.tmp"
	echo "$MODLIST" >"$K/modules/.done"
fi

# ---- one build per input hash ------------------------------------------
HASH=$( {
	echo "$KVER"
	cat "$BB/.done"
	cat "$HERE/build.sh" "$HERE/extract-vmlinux.sh" "$HERE/src/init" "$HERE/src/gpwork.c" "$HERE/../labkit/waitfor"
	gcc --version | head -1
} | sha256sum | cut -c1-12)
O=$LAB/out-$HASH
if [ ! -e "$O/.done" ]; then
	log "building $O"
	rm -rf "$O" "$O.tmp" && mkdir -p "$O.tmp"
	for f in vmlinux System.map config; do
		ln "$K/$f" "$O.tmp/$f" 2>/dev/null || cp "$K/$f" "$O.tmp/$f"
	done
	ln "$K/vmlinuz" "$O.tmp/bzImage" 2>/dev/null || cp "$K/vmlinuz" "$O.tmp/bzImage"
	gcc -static -O2 -Wall -o "$O.tmp/gpwork" "$HERE/src/gpwork.c"
	# an empty minix filesystem for the minix module (busybox has no mkfs.minix)
	truncate -s 1M "$O.tmp/minix.img"
	mkfs.minix "$O.tmp/minix.img" >/dev/null
	mkdir -p "$O.tmp/mods" && cp -a "$K/modules/." "$O.tmp/mods/" && rm -f "$O.tmp/mods/.done"
	make_initramfs "$O.tmp/rd" "$O.tmp/initramfs.cpio.gz" "$O.tmp/gpwork" "$O.tmp/mods" "$O.tmp/minix.img"
	rm -rf "$O.tmp/mods"
	rm -rf "$O.tmp/rd"
	{
		echo "KVER=$KVER"
		echo "KERNEL_PACKAGE=$KPKG $(cat "$K/package-version")"
		echo "BUSYBOX_PACKAGE=$(cat "$BB/.done")"
		echo "COMPRESSION=$(cat "$K/compression")"
		echo "SYSTEM_MAP_SOURCE=$(cat "$K/System.map.source")"
		echo "BTF=$(sections "$K/vmlinux" | awk '$1 == ".BTF" {print "size 0x" $5}')"
		echo "MODULES=$MODLIST"
		echo "HASH=$HASH"
	} >"$O.tmp/BUILDINFO"
	touch "$O.tmp/.done"
	mv "$O.tmp" "$O"
fi
ln -sfn "out-$HASH" "$LAB/out.tmp" && mv -T "$LAB/out.tmp" "$LAB/out"
# other builds go only when unused for hours (a concurrent run may need one)
prune_outs "$HASH"
echo "$O"
