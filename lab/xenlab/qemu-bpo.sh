#!/bin/bash
# gprobes Xen lab: Debian's QEMU from bookworm-backports (10.0) in a private
# prefix, next to the system's QEMU 7.2, which stays as it is (the QEMU lab
# and the other tests use it). QEMU 7.2's TCG never arms an SVM guest's
# debug registers at VMRUN; QEMU 9.1 and later do ("target/i386:
# disable/enable breakpoints on vmentry/vmexit"), which the HVM/PVH probe
# test needs (xen/zqemu10_lab_test.go, docs/xen.md "HVM and PVH domains").
#
#   lab/xenlab/qemulab-bpo.sh            fetch (or reuse) it; prints the prefix last
#   lab/xenlab/qemulab-bpo.sh --refresh  fetch again, for a newer backport
#
# Nothing is built and nothing is installed: a private apt state (the
# machine's mirror, suites bookworm, bookworm-updates and bookworm-backports,
# the Debian archive keyring) resolves qemu-system-x86 from backports against
# what the host has installed (apt-get install --simulate), `apt-get
# download`s every package that it would install (qemu-system-x86,
# qemu-system-common, qemu-system-data, seabios, and any library the host
# lacks or has too old; apt checks each .deb against the signed indexes) and
# dpkg-deb -x'es them into the prefix:
#
#   $GPROBES_XENLAB/qemu-bpo/apt/     private apt state
#   $GPROBES_XENLAB/qemu-bpo/debs/    the .deb files
#   $GPROBES_XENLAB/qemu-bpo/root/    the prefix: usr/bin/qemu-system-x86_64,
#                                     usr/share/qemu and usr/share/seabios
#                                     (its -L), usr/lib/x86_64-linux-gnu
#                                     (libraries, if any: LD_LIBRARY_PATH),
#                                     .done (the packages and their sha256)
#
# Idempotent: with root/.done there, it only checks the binary runs (no
# network). Concurrent runs serialize on qemu-bpo/.lock.
set -euo pipefail
LAB=${GPROBES_XENLAB:-${HOME:-/root}/.cache/gprobes-xenlab}
Q=$LAB/qemu-bpo
SUITE=bookworm-backports
log() { echo "qemu-bpo: $*" >&2; }
die() { echo "qemu-bpo: error: $*" >&2; exit 1; }

refresh=
case ${1:-} in
--refresh) refresh=1 ;;
"") ;;
*) die "usage: $0 [--refresh]" ;;
esac

mkdir -p "$Q"
exec 9>"$Q/.lock"
flock 9

R=$Q/root
check() { # the binary loads its libraries and runs
	local env=()
	[ -d "$R/usr/lib/x86_64-linux-gnu" ] && ls "$R"/usr/lib/x86_64-linux-gnu/*.so* >/dev/null 2>&1 &&
		env=(LD_LIBRARY_PATH="$R/usr/lib/x86_64-linux-gnu")
	if env "${env[@]}" ldd "$R/usr/bin/qemu-system-x86_64" | grep 'not found' >&2; then
		die "$R/usr/bin/qemu-system-x86_64 lacks libraries (above)"
	fi
	env "${env[@]}" "$R/usr/bin/qemu-system-x86_64" --version | head -1 >&2 ||
		die "$R/usr/bin/qemu-system-x86_64 --version failed"
}

if [ -z "$refresh" ] && [ -e "$R/.done" ]; then
	check
	echo "$R"
	exit 0
fi

mirror_uri() { # the machine's Debian mirror, as lab/xenlab/build.sh finds it
	local u=""
	[ -r /etc/apt/sources.list.d/debian.sources ] &&
		u=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
	[ -z "$u" ] && [ -r /etc/apt/sources.list ] &&
		u=$(awk '$1 == "deb" && $0 !~ /security/ {for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) {print $i; exit}}' /etc/apt/sources.list)
	echo "${u:-http://deb.debian.org/debian}"
}
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
[ -r "$KEYRING" ] || die "no $KEYRING (package debian-archive-keyring)"
A=$Q/apt
rm -rf "$A" && mkdir -p "$A/parts" "$A/lists/partial" "$A/cache/archives/partial"
printf 'Types: deb\nURIs: %s\nSuites: bookworm bookworm-updates %s\nComponents: main\nSigned-By: %s\n' \
	"$(mirror_uri)" "$SUITE" "$KEYRING" >"$A/parts/debian.sources"
APTO=(-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$A/parts"
	-o Dir::State::Lists="$A/lists" -o Dir::Cache="$A/cache" -o APT::Sandbox::User=root)
log "apt-get update (private list: bookworm, bookworm-updates, $SUITE)"
apt-get "${APTO[@]}" update -qq >&2 || die "apt-get update of the private list failed"

# what installing qemu-system-x86 from backports would install on this host
sim=$(apt-get "${APTO[@]}" install --simulate --no-install-recommends "qemu-system-x86/$SUITE" 2>&1) ||
	die "apt-get cannot resolve qemu-system-x86/$SUITE:
$sim"
PKGS=()
while read -r name ver; do PKGS+=("$name=$ver"); done < <(
	echo "$sim" | sed -n 's/^Inst \([^ ]*\) \(\[[^]]*\] \)\?(\([^ ]*\) .*/\1 \3/p')
printf '%s\n' "${PKGS[@]}" | grep -q '^qemu-system-x86=' ||
	die "the simulation installs no qemu-system-x86:
$sim"
log "packages: ${PKGS[*]}"

rm -rf "$Q/debs.tmp" && mkdir -p "$Q/debs.tmp"
(cd "$Q/debs.tmp" && apt-get "${APTO[@]}" download -q "${PKGS[@]}" >&2) || die "apt-get download failed"
rm -rf "$R.tmp" && mkdir -p "$R.tmp"
for d in "$Q"/debs.tmp/*.deb; do dpkg-deb -x "$d" "$R.tmp"; done
(cd "$Q/debs.tmp" && sha256sum -- *.deb) >"$R.tmp/.packages"
rm -rf "$Q/debs" "$R" && mv "$Q/debs.tmp" "$Q/debs" && mv "$R.tmp" "$R"
check
mv "$R/.packages" "$R/.done"
echo "$R"
