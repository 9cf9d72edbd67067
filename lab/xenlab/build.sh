#!/bin/bash
# gprobes Xen lab: build Xen 4.17 (with CONFIG_GDBSX) + a Linux PV dom0 with
# the xl toolstack + PV domU images, from Debian packages, without
# installing any of them on the host.
#
#   lab/xenlab/build.sh          build (or reuse) the artifacts; prints the out dir last
#   lab/xenlab/build.sh --deps   only install the host packages the lab needs (root)
#   lab/xenlab/build.sh --check  only report missing host tools (exit 1 if any)
#
# Environment:
#   GPROBES_XENLAB  cache folder (default $HOME/.cache/gprobes-xenlab)
#   GPROBES_LAB     the QEMU lab's cache (default $HOME/.cache/gprobes-qemulab):
#                   its debs/ and kernel/<KVER>/System.map are reused if there
#   GPROBES_KVER    Debian kernel ABI for dom0 and domUs (default below)
#
# Layout of $GPROBES_XENLAB:
#   debs/               downloaded .deb files (apt-get download)
#   root-<hash>/        the Xen packages, dpkg-deb -x'ed
#   kernel/<KVER>/      vmlinuz, the xen driver modules, System.map
#   apt/                private apt state for `apt-get source xen` (deb-src)
#   tools/              flex/bison/m4 dpkg-deb -x'ed, when the host lacks them
#   hv-<hash>/          the hypervisor rebuilt with CONFIG_GDBSX: xen, xen.config,
#                       and xen-cr2sync, the same with src/xen-svm-cr2.patch
#                       (for HVM/PVH guests under QEMU 10.0's TCG; see the patch)
#                       (rebuilt only when its inputs change: source package,
#                       Debian's config, src/xen-gdbsx.config, the patch, gcc)
#   out-<hash>/         one build: xen xen.config xen-cr2sync xen-stock vmlinuz
#                       System.map dom0-initrd.gz domU-initrd.gz gpwork domu-run
#                       BUILDINFO
#   qemu-bpo/           Debian's QEMU 10.0 from bookworm-backports, for the
#                       tests that ask for it (qemu-bpo.sh, not run by build.sh)
#   out -> out-<hash>   the current build
# Idempotent: a second run with the same inputs does nothing. Concurrent runs
# serialize on $GPROBES_XENLAB/.lock.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
LAB=${GPROBES_XENLAB:-${HOME:-/root}/.cache/gprobes-xenlab}
QLAB=${GPROBES_LAB:-${HOME:-/root}/.cache/gprobes-qemulab}
KVER=${GPROBES_KVER:-6.1.0-56-amd64}
XENV=4.17
HV_RECIPE=2 # bump when the hypervisor build steps below change

declare -A CMD_PKG=(
	[qemu-system-x86_64]=qemu-system-x86 [cpio]=cpio [gzip]=gzip [gcc]=gcc [make]=make
	[/usr/bin/python3]=python3 [readelf]=binutils [nm]=binutils [flock]=util-linux
	[sha256sum]=coreutils [apt-get]=apt [dpkg-deb]=dpkg [dpkg-source]=dpkg-dev
	[ldd]=libc-bin [tar]=tar [xz]=xz-utils
)

NAME=xenlab
DEB_ALSO=$QLAB/debs # fetch reuses the QEMU lab's downloads
# the host tools, --deps and --check, the lock, fetch: shared with the other lab
source "$HERE/../labkit/lab.sh"

# ---- Xen packages (hypervisor config, toolstack, libraries) -------------
XEN_PKGS="xen-hypervisor-$XENV-amd64 xen-utils-$XENV xen-utils-common xenstore-utils
 libxenmisc$XENV libxenstore4 libxentoollog1 libxencall1 libxendevicemodel1 libxenevtchn1
 libxenforeignmemory1 libxengnttab1 libxenhypfs1 libxentoolcore1 libyajl2 busybox-static"
DEBS=()
for p in $XEN_PKGS; do DEBS+=("$(fetch "$p")"); done
RHASH=$(for d in "${DEBS[@]}"; do basename "$d"; done | sha256sum | cut -c1-12)
ROOT=$LAB/root-$RHASH
if [ ! -e "$ROOT/.done" ]; then
	log "extracting the Xen packages into $ROOT"
	rm -rf "$ROOT" "$ROOT.tmp" && mkdir -p "$ROOT.tmp"
	for d in "${DEBS[@]}"; do dpkg-deb -x "$d" "$ROOT.tmp"; done
	for d in "${DEBS[@]}"; do basename "$d"; done >"$ROOT.tmp/.done"
	mv "$ROOT.tmp" "$ROOT"
	ls -1d "$LAB"/root-* | grep -v "/root-$RHASH\$" | xargs -r rm -rf || true
fi
[ -x "$ROOT/bin/busybox" ] || die "busybox-static has no bin/busybox"
XENGZ=$(ls "$ROOT"/boot/xen-$XENV-amd64.gz 2>/dev/null | head -1)
[ -n "$XENGZ" ] || die "xen-hypervisor-$XENV-amd64 has no boot/xen-$XENV-amd64.gz"

# ---- kernel: vmlinuz + the xen driver modules, once per KVER ------------
K=$LAB/kernel/$KVER
if [ ! -e "$K/.done" ]; then
	KDEB=$(fetch "linux-image-$KVER")
	log "extracting ./boot and drivers/xen of $(basename "$KDEB")"
	rm -rf "$K" "$K.tmp" && mkdir -p "$K.tmp/root"
	dpkg-deb --fsys-tarfile "$KDEB" | tar -x -C "$K.tmp/root" ./boot "./lib/modules/$KVER/kernel/drivers/xen"
	cp "$K.tmp/root/boot/vmlinuz-$KVER" "$K.tmp/vmlinuz"
	cp "$K.tmp/root/boot/config-$KVER" "$K.tmp/config"
	mv "$K.tmp/root/lib/modules/$KVER/kernel/drivers/xen" "$K.tmp/xen-modules"
	grep -q '^CONFIG_XEN_DOM0=y' "$K.tmp/config" || die "linux-image-$KVER has no CONFIG_XEN_DOM0"
	# Debian's System.map is a placeholder; the QEMU lab makes a real one
	# (kallsyms of a nokaslr boot = link-time addresses, which is where a PV
	# guest's kernel runs).
	if [ -s "$QLAB/kernel/$KVER/System.map" ]; then
		cp "$QLAB/kernel/$KVER/System.map" "$K.tmp/System.map"
		echo "the QEMU lab's $QLAB/kernel/$KVER/System.map" >"$K.tmp/System.map.source"
	else
		cp "$K.tmp/root/boot/System.map-$KVER" "$K.tmp/System.map"
		echo "Debian's boot/System.map-$KVER (placeholder unless lab/qemulab/build.sh ran first)" >"$K.tmp/System.map.source"
	fi
	dpkg-deb -f "$KDEB" Version >"$K.tmp/package-version"
	rm -rf "$K.tmp/root"
	touch "$K.tmp/.done"
	mv "$K.tmp" "$K"
fi

# ---- the domUs' kernel modules: once per KVER and list ---------------------
# Modules of the same package put in the domUs (/lib/modules/KVER), for the
# tests of module probes (xen/module_lab_test.go): rmd160 with what AF_ALG
# hashing needs (gpwork hash rmd160 N calls rmd160_final N times). Every
# dependency must be in the list (checked below).
DOMU_MODULES="crypto/af_alg.ko crypto/algif_hash.ko crypto/rmd160.ko"
DMODLIST=$(echo $DOMU_MODULES)
if [ ! -e "$K/domU-modules/.done" ] || [ "$(cat "$K/domU-modules/.done")" != "$DMODLIST" ]; then
	KDEB=$(fetch "linux-image-$KVER")
	log "extracting $DMODLIST from $(basename "$KDEB")"
	rm -rf "$K/domU-modules" "$K/domU-modules.tmp" && mkdir -p "$K/domU-modules.tmp/root"
	members="./lib/modules/$KVER/modules.builtin ./lib/modules/$KVER/modules.order"
	for m in $DOMU_MODULES; do members="$members ./lib/modules/$KVER/kernel/$m"; done
	dpkg-deb --fsys-tarfile "$KDEB" | tar -x -C "$K/domU-modules.tmp/root" $members ||
		die "linux-image-$KVER lacks one of: $members"
	for m in $DOMU_MODULES; do
		for d in $(readelf -p .modinfo "$K/domU-modules.tmp/root/lib/modules/$KVER/kernel/$m" |
			sed -n 's/.*\]  depends=//p' | tr ',' ' '); do
			case " $DMODLIST " in
			*/$d.ko\ *) ;;
			*) die "module $m depends on $d, which is not in DOMU_MODULES (build.sh)" ;;
			esac
		done
	done
	mv "$K/domU-modules.tmp/root/lib/modules/$KVER" "$K/domU-modules"
	rm -rf "$K/domU-modules.tmp"
	echo "$DMODLIST" >"$K/domU-modules/.done"
fi

# ---- the hypervisor, rebuilt with CONFIG_GDBSX ---------------------------
# Debian's xen-hypervisor package lacks CONFIG_GDBSX: without it Xen reports
# a PV guest's int3 neither to gdbsx nor to any dom0 debugger. Rebuild it from
# the Debian source package with Debian's own config plus src/xen-gdbsx.config.
# A private apt state (deb-src of the plain bookworm suite of the machine's
# mirror; the security suite lists a newer source its pool may not hold)
# keeps the system's apt configuration untouched.
A=$LAB/apt
mirror_uri() {
	local u=""
	[ -r /etc/apt/sources.list.d/debian.sources ] &&
		u=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
	[ -z "$u" ] && [ -r /etc/apt/sources.list ] &&
		u=$(awk '$1 == "deb" && $0 !~ /security/ {for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) {print $i; exit}}' /etc/apt/sources.list)
	echo "${u:-http://deb.debian.org/debian}"
}
if [ ! -e "$A/src/.done" ]; then
	log "apt-get source --download-only xen (private deb-src list)"
	rm -rf "$A" && mkdir -p "$A/parts" "$A/lists/partial" "$A/cache/archives/partial" "$A/src"
	printf 'Types: deb-src\nURIs: %s\nSuites: bookworm\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
		"$(mirror_uri)" >"$A/parts/debian-src.sources"
	APTO=(-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$A/parts"
		-o Dir::State::Lists="$A/lists" -o Dir::Cache="$A/cache" -o APT::Sandbox::User=root)
	apt-get "${APTO[@]}" update -qq >&2 || die "apt-get update of the private deb-src list failed"
	(cd "$A/src" && apt-get "${APTO[@]}" source --download-only xen >&2) || die "apt-get source xen failed"
	ls "$A"/src/xen_*.dsc >/dev/null || die "no xen_*.dsc downloaded"
	touch "$A/src/.done"
fi
DSC=$(ls "$A"/src/xen_*.dsc | head -1)
HVHASH=$( {
	echo "recipe $HV_RECIPE"
	cat "$DSC" "$ROOT/boot/xen-$XENV-amd64.config" "$HERE/src/xen-gdbsx.config" "$HERE/src/xen-svm-cr2.patch"
	gcc --version | head -1
} | sha256sum | cut -c1-12)
HV=$LAB/hv-$HVHASH
if [ ! -e "$HV/.done" ]; then
	T=$LAB/tools
	if ! command -v bison >/dev/null || ! command -v flex >/dev/null; then
		if [ ! -x "$T/usr/bin/bison" ] || [ ! -x "$T/usr/bin/flex" ]; then
			rm -rf "$T" && mkdir -p "$T/debs"
			for p in flex bison m4 libfl2; do
				(cd "$T/debs" && apt-get download -q -o APT::Sandbox::User=root "$p" >&2) || die "apt-get download $p failed"
			done
			for d in "$T"/debs/*.deb; do dpkg-deb -x "$d" "$T"; done
		fi
		export PATH=$T/usr/bin:$PATH BISON_PKGDATADIR=$T/usr/share/bison M4=$T/usr/bin/m4
	fi
	log "building the hypervisor with CONFIG_GDBSX from $(basename "$DSC") (~90 s on 2 cores)"
	rm -rf "$HV" "$HV.tmp" && mkdir -p "$HV.tmp"
	(cd "$HV.tmp" && dpkg-source -q -x "$DSC" src >&2) || die "dpkg-source -x $DSC failed"
	S=$HV.tmp/src/xen
	{ cat "$ROOT/boot/xen-$XENV-amd64.config"; grep -v '^#' "$HERE/src/xen-gdbsx.config"; } >"$S/.config"
	# the .config's '# CONFIG_DEBUG_INFO is not set' line matters too
	grep '^# CONFIG_.* is not set' "$HERE/src/xen-gdbsx.config" >>"$S/.config" || true
	make -C "$S" olddefconfig PYTHON=/usr/bin/python3 >"$HV.tmp/build.log" 2>&1 ||
		{ tail -30 "$HV.tmp/build.log" >&2; die "xen make olddefconfig failed"; }
	grep -q '^CONFIG_GDBSX=y' "$S/.config" || die "CONFIG_GDBSX did not stick in the hypervisor .config"
	make -C "$S" -j"$(nproc)" PYTHON=/usr/bin/python3 >>"$HV.tmp/build.log" 2>&1 ||
		{ tail -40 "$HV.tmp/build.log" >&2; die "xen build failed (log: $HV.tmp/build.log)"; }
	nm "$S/xen-syms" | grep gdbsx_guest_mem_io >/dev/null || die "the built hypervisor has no gdbsx_guest_mem_io"
	cp "$S/xen" "$HV.tmp/xen"
	# xen-cr2sync: the same tree with src/xen-svm-cr2.patch (svm.c and the
	# link again, ~15 s)
	patch -d "$HV.tmp/src" -p1 -s <"$HERE/src/xen-svm-cr2.patch" >>"$HV.tmp/build.log" 2>&1 ||
		{ tail -10 "$HV.tmp/build.log" >&2; die "src/xen-svm-cr2.patch does not apply"; }
	make -C "$S" -j"$(nproc)" PYTHON=/usr/bin/python3 >>"$HV.tmp/build.log" 2>&1 ||
		{ tail -40 "$HV.tmp/build.log" >&2; die "xen build with src/xen-svm-cr2.patch failed (log: $HV.tmp/build.log)"; }
	cp "$S/xen" "$HV.tmp/xen-cr2sync"
	cp "$S/.config" "$HV.tmp/xen.config"
	basename "$DSC" >"$HV.tmp/source"
	rm -rf "$HV.tmp/src" "$HV.tmp"/*.tar.* "$HV.tmp"/*.debian.* "$HV.tmp"/*.dsc
	touch "$HV.tmp/.done"
	mv "$HV.tmp" "$HV"
	ls -1d "$LAB"/hv-* | grep -v "/hv-$HVHASH\$" | xargs -r rm -rf || true
	log "hypervisor built: $HV/xen"
fi

# ---- one build per input hash ------------------------------------------
HASH=$( {
	echo "$KVER $RHASH $HVHASH"
	cat "$K/package-version"
	cat "$HERE/build.sh" "$HERE"/src/* "$HERE/../qemulab/src/gpwork.c" "$HERE/../labkit/waitfor"
	gcc --version | head -1
} | sha256sum | cut -c1-12)
O=$LAB/out-$HASH
mkinitrd() { # mkinitrd DIR OUT
	if [ "$(id -u)" = 0 ]; then
		mknod -m 600 "$1/dev/console" c 5 1
		mknod -m 666 "$1/dev/null" c 1 3
	fi
	(cd "$1" && find . | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet | gzip -1n) >"$2"
}
if [ ! -e "$O/.done" ]; then
	log "building $O"
	rm -rf "$O" "$O.tmp" && mkdir -p "$O.tmp"
	cp "$HV/xen" "$O.tmp/xen"
	cp "$HV/xen.config" "$O.tmp/xen.config"
	cp "$HV/xen-cr2sync" "$O.tmp/xen-cr2sync"
	zcat "$XENGZ" >"$O.tmp/xen-stock" # QEMU's multiboot loader cannot read gzip
	cp "$K/vmlinuz" "$O.tmp/vmlinuz"
	cp "$K/System.map" "$O.tmp/System.map"
	gcc -static -O2 -Wall -o "$O.tmp/gpwork" "$HERE/../qemulab/src/gpwork.c"
	gcc -static -O2 -Wall -o "$O.tmp/domu-run" "$HERE/src/domu-run.c"

	# domU: busybox + gpwork + the command loop on hvc0
	R=$O.tmp/domU-rd
	mkdir -p "$R"/{bin,sbin,etc,proc,sys,dev,tmp,root}
	cp "$ROOT/bin/busybox" "$R/bin/busybox"
	install -m 755 "$HERE/src/domU-init" "$R/init"
	install -m 755 "$HERE/src/xlab-serve" "$HERE/../labkit/waitfor" "$R/bin/"
	install -m 755 "$O.tmp/gpwork" "$R/bin/gpwork"
	printf 'gprobes lab file a\n' >"$R/etc/gp-a" # gpwork's default paths
	printf 'gprobes lab file b\n' >"$R/etc/gp-b"
	printf 'root:x:0:0:root:/root:/bin/sh\n' >"$R/etc/passwd"
	printf 'root:x:0:\n' >"$R/etc/group"
	# the kernel modules of DOMU_MODULES, with modules.dep for busybox modprobe
	mkdir -p "$R/lib/modules/$KVER"
	cp -a "$K/domU-modules/." "$R/lib/modules/$KVER/" && rm -f "$R/lib/modules/$KVER/.done"
	"$ROOT/bin/busybox" depmod -b "$R" "$KVER"
	mkinitrd "$R" "$O.tmp/domU-initrd.gz"
	rm -rf "$R"

	# dom0: busybox + toolstack + its libraries + xen modules + the guest files
	R=$O.tmp/dom0-rd
	mkdir -p "$R"/{bin,sbin,etc/xen,proc,sys,dev,run,tmp,root,guest,var,lib64,lib/x86_64-linux-gnu}
	ln -s ../run "$R/var/run"
	cp "$ROOT/bin/busybox" "$R/bin/busybox"
	install -m 755 "$HERE/src/dom0-init" "$R/init"
	install -m 755 "$HERE/src/xlab-serve" "$HERE/src/xlab-domu" "$HERE/src/xlab-gp" "$HERE/../labkit/waitfor" "$O.tmp/domu-run" "$O.tmp/gpwork" "$R/bin/"
	XB=usr/lib/xen-$XENV/bin
	BINS="$XB/xl $XB/xenstored $XB/xenconsoled $XB/xenconsole $XB/xen-init-dom0 $XB/xenctx
	 $XB/libxl-save-helper $XB/xen-access usr/bin/xenstore usr/sbin/gdbsx"
	export LD_LIBRARY_PATH=$ROOT/usr/lib/x86_64-linux-gnu:$ROOT/usr/lib/xen-$XENV/lib/x86_64-linux-gnu
	for b in $BINS; do
		[ -e "$ROOT/$b" ] || die "the Xen packages have no /$b"
		mkdir -p "$R/$(dirname "$b")"
		cp -a "$ROOT/$b" "$R/$b"
		ldd "$ROOT/$b" | awk '/=>/ {print $3} /ld-linux/ && !/=>/ {print $1}' | while read -r lib; do
			[ -e "$lib" ] || die "library $lib of /$b not found (ldd: $(ldd "$ROOT/$b" | grep 'not found' | tr '\n' ' '))"
			case $lib in
			"$ROOT"/*) dst=$R/${lib#"$ROOT"/} ;;
			/lib64/*) dst=$R$lib ;;
			*) dst=$R/lib/x86_64-linux-gnu/$(basename "$lib") ;;
			esac
			mkdir -p "$(dirname "$dst")"
			[ -e "$dst" ] || cp -L "$lib" "$dst"
		done
	done
	if ldd "$ROOT/$XB/xl" | grep 'not found' >/dev/null; then die "xl: $(ldd "$ROOT/$XB/xl" | grep 'not found')"; fi
	# glibc dlopen()s libgcc_s for pthread_cancel (xl aborts without it)
	cp -L "$(gcc -print-file-name=libgcc_s.so.1)" "$R/lib/x86_64-linux-gnu/" 2>/dev/null ||
		cp -L /lib/x86_64-linux-gnu/libgcc_s.so.1 "$R/lib/x86_64-linux-gnu/"
	for t in read write ls list rm exists watch chmod control; do ln -sf xenstore "$R/usr/bin/xenstore-$t"; done
	mkdir -p "$R/lib/modules/$KVER/kernel/drivers"
	cp -a "$K/xen-modules" "$R/lib/modules/$KVER/kernel/drivers/xen"
	cp "$ROOT/etc/xen/xl.conf" "$R/etc/xen/"
	install -m 644 "$HERE/src/domU.cfg.in" "$R/etc/xen/domU.cfg.in"
	printf 'root:x:0:0:root:/root:/bin/sh\n' >"$R/etc/passwd"
	printf 'root:x:0:\n' >"$R/etc/group"
	cp "$K/vmlinuz" "$R/guest/vmlinuz"
	cp "$K/System.map" "$R/guest/System.map"
	cp "$O.tmp/domU-initrd.gz" "$R/guest/domU-initrd.gz"
	mkinitrd "$R" "$O.tmp/dom0-initrd.gz"
	rm -rf "$R"

	# gdb for dom0, not in its initrd (the tests that open a guest's core or
	# attach through gdbsx add it with Extra): Debian's gdb-minimal (gdb
	# without Python, which would need its library tree) and every library
	# it loads, for LD_LIBRARY_PATH=gdb/lib
	G=$O.tmp/gdb
	mkdir -p "$G/lib" "$O.tmp/gdb-root"
	dpkg-deb -x "$(fetch gdb-minimal)" "$O.tmp/gdb-root"
	cp "$O.tmp/gdb-root/usr/bin/gdb" "$G/gdb"
	rm -rf "$O.tmp/gdb-root"
	if ldd "$G/gdb" | grep 'not found' >/dev/null; then
		die "gdb-minimal needs libraries this host lacks (apt-get install gdb brings them): $(ldd "$G/gdb" | grep 'not found' | tr '\n' ' ')"
	fi
	ldd "$G/gdb" | awk '/=>/ {print $3}' | while read -r lib; do cp -L "$lib" "$G/lib/"; done
	{
		echo "KVER=$KVER"
		echo "KERNEL_PACKAGE=linux-image-$KVER $(cat "$K/package-version")"
		echo "SYSTEM_MAP_SOURCE=$(cat "$K/System.map.source")"
		echo "XEN_PACKAGES=$(tr '\n' ' ' <"$ROOT/.done")"
		echo "HYPERVISOR_SOURCE=$(cat "$HV/source") + src/xen-gdbsx.config (hv-$HVHASH)"
		echo "HYPERVISOR_GDBSX=$(grep -c '^CONFIG_GDBSX=y' "$HV/xen.config")"
		echo "HASH=$HASH"
	} >"$O.tmp/BUILDINFO"
	touch "$O.tmp/.done"
	mv "$O.tmp" "$O"
fi
ln -sfn "out-$HASH" "$LAB/out.tmp" && mv -T "$LAB/out.tmp" "$LAB/out"
# other builds go only when unused for hours (a concurrent run may need one)
prune_outs "$HASH"
echo "$O"
