# Sourced by lab/qemulab/build.sh and lab/xenlab/build.sh: what the two labs'
# builds share, the host tools and the Debian packages they fetch.
#
# The caller sets, before sourcing it with its own arguments ("$@"):
#   NAME       the prefix of messages ("qemulab", "xenlab")
#   LAB        its cache folder
#   CMD_PKG    an associative array: host command -> Debian package
#   DEB_ALSO   optional: another debs/ folder fetch reuses (the QEMU lab's)
# It defines log, die, apt_update, pkg_known and fetch; answers --deps
# (install the host packages, exit) and --check (report them, exit);
# otherwise installs what is missing, creates $LAB/debs and $LAB/kernel and
# holds $LAB/.lock (fd 9) for the rest of the build.

log() { echo "$NAME: $*" >&2; }
die() { echo "$NAME: error: $*" >&2; exit 1; }

missing_pkgs() {
	local c out=""
	for c in "${!CMD_PKG[@]}"; do
		command -v "$c" >/dev/null 2>&1 || out="$out ${CMD_PKG[$c]}"
	done
	[ -e /usr/lib/x86_64-linux-gnu/libc.a ] || out="$out libc6-dev"
	echo $out | tr ' ' '\n' | sort -u | tr '\n' ' '
}

apt_updated=
apt_update() {
	[ -n "$apt_updated" ] && return 0
	[ "$(id -u)" = 0 ] || return 1
	log "apt-get update"
	apt-get update -qq >&2 || return 1
	apt_updated=1
}

install_deps() {
	local miss
	miss=$(missing_pkgs)
	[ -z "${miss// /}" ] && { log "host tools present"; return 0; }
	[ "$(id -u)" = 0 ] || die "missing host tools; as root run: apt-get install -y --no-install-recommends $miss"
	log "installing:$miss"
	apt_update || true
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $miss >&2
	miss=$(missing_pkgs)
	[ -z "${miss// /}" ] || die "still missing after install: $miss"
}

case ${1:-} in
--deps) install_deps; exit 0 ;;
--check)
	miss=$(missing_pkgs)
	[ -z "${miss// /}" ] && exit 0
	echo "missing host packages: $miss(as root: $0 --deps)"
	exit 1
	;;
"") ;;
*) die "usage: $0 [--deps|--check]" ;;
esac

install_deps
mkdir -p "$LAB/debs" "$LAB/kernel"
exec 9>"$LAB/.lock"
flock 9

pkg_known() { apt-cache show "$1" >/dev/null 2>&1; }

fetch() { # fetch PKG -> path of its .deb under $LAB/debs (or $DEB_ALSO)
	local pkg=$1 f
	f=$(ls "$LAB/debs/${pkg}_"*.deb ${DEB_ALSO:+"$DEB_ALSO/${pkg}_"*.deb} 2>/dev/null | head -1 || true)
	if [ -z "$f" ]; then
		pkg_known "$pkg" || apt_update || true
		log "apt-get download $pkg"
		(cd "$LAB/debs" && apt-get download -q -o APT::Sandbox::User=root "$pkg" >&2) ||
			die "apt-get download $pkg failed"
		f=$(ls "$LAB/debs/${pkg}_"*.deb | head -1)
	fi
	echo "$f"
}

# prune_outs HASH: the build out-HASH is in use now; remove the other builds
# no one has asked for in six hours. Several checkouts (a CI run, a
# developer's worktrees) share one cache and may each need their own build
# at the same time: keeping only the newest other build removed a build a
# running test was about to boot. Each build.sh run stamps the build it
# returns (.used), and a build is removed only when that stamp is old.
prune_outs() {
	touch "$LAB/out-$1/.used"
	local d
	for d in "$LAB"/out-*; do
		[ -d "$d" ] && [ "$d" != "$LAB/out-$1" ] || continue
		if [ -z "$(find "$d" -maxdepth 1 -name .used -mmin -360 2>/dev/null)" ] &&
			[ -z "$(find "$d" -maxdepth 0 -mmin -360 2>/dev/null)" ]; then
			rm -rf "$d"
		fi
	done
}
