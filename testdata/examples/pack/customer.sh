#!/bin/sh
# What a customer does with the vendor's pack (docs/ppdf.md, "Packs for
# customers"): a gprobes daemon that takes only packs signed by a key of
# ALLOWED_SIGNERS, and one command to insert the pack into PROGRAM as it
# starts; then the records. The pack holds a build of the probed library
# for each build the vendor ships: insert takes the one PROGRAM loads.
#
#	customer.sh PACK ALLOWED_SIGNERS PROGRAM [ARGS...]
#
# $GPROBES is the gprobes to run (default: gprobes).
set -eu
[ $# -ge 3 ] || { echo "usage: $0 PACK ALLOWED_SIGNERS PROGRAM [ARGS...]" >&2; exit 2; }
pack=$1 allowed=$2
shift 2
gp=${GPROBES:-gprobes}
dir=$(mktemp -d)
daemon=
cleanup() {
	[ -z "$daemon" ] || { kill "$daemon" 2>/dev/null; wait "$daemon" 2>/dev/null || true; }
	rm -rf "$dir"
}
trap cleanup EXIT

# the service: in real life gprobes.service, started with these flags
"$gp" daemon --socket "$dir/sock" --state "$dir/state" --require-signed --allowed-signers "$allowed" >"$dir/daemon.out" 2>&1 &
daemon=$!
i=0
until [ -S "$dir/sock" ]; do
	i=$((i + 1))
	[ $i -lt 200 ] || { cat "$dir/daemon.out" >&2; exit 1; }
	sleep 0.05
done

# the one command
"$gp" insert --socket "$dir/sock" --allowed-signers "$allowed" --target "exec:$*" "$pack"

# the program runs once the probes are in; when it has exited, its probes
# are gone (or were refused: a build of the library the pack does not hold)
i=0
while "$gp" query --socket "$dir/sock" --all | grep -Eq ' (pending|active) '; do
	i=$((i + 1))
	[ $i -lt 600 ] || { echo "$0: the program did not end" >&2; exit 1; }
	sleep 0.05
done
"$gp" query --socket "$dir/sock" --all
"$gp" log --socket "$dir/sock"
if "$gp" query --socket "$dir/sock" --all | grep -q ' refused '; then
	echo "$0: the pack was refused (query's REASON says why)" >&2
	exit 1
fi
