#!/bin/bash
# lab/qemulab/run.sh [--kaslr] [--bzimage] [--protocol] [--file HOST=GUEST]... [-- QEMU ARGS...]
#
# Boot the lab guest on this terminal, for a human: a busybox shell on the
# serial console (Ctrl-a x quits QEMU, Ctrl-a c toggles the QEMU monitor),
# QEMU's GDB stub on 127.0.0.1:${GDBPORT:-1234}. --protocol runs the test
# protocol instead of the shell (type commands blind; see src/init).
# --file adds the host file HOST to the guest as GUEST (an absolute path),
# like qemulab.Options.Files: e.g. --file /tmp/gprobes=/bin/gprobes with a
# static gprobes (CGO_ENABLED=0 go build -o /tmp/gprobes ./cmd/gprobes).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
O=$("$HERE/build.sh")
KERNEL=$O/vmlinux APPEND="console=ttyS0 quiet panic=-1 no_timer_check" KASLR=nokaslr SHELLARG=gplab.shell
INITRD=$O/initramfs.cpio.gz FILES=()
while [ $# -gt 0 ]; do
	case $1 in
	--kaslr) KASLR= KERNEL=$O/bzImage ;;
	--bzimage) KERNEL=$O/bzImage ;;
	--protocol) SHELLARG= ;;
	--file) shift; [[ ${1:-} == ?*=/?* ]] || { echo "--file HOST=/GUEST/PATH" >&2; exit 2; }; FILES+=("$1") ;;
	--) shift; break ;;
	*) echo "usage: $0 [--kaslr] [--bzimage] [--protocol] [--file HOST=GUEST]... [-- QEMU ARGS...]" >&2; exit 2 ;;
	esac
	shift
done
if [ ${#FILES[@]} -gt 0 ]; then
	# the lab's initramfs, zero-padded to 4 bytes, then an uncompressed newc
	# archive of the files: Linux unpacks both (see initrd.go)
	T=$(mktemp -d) && trap 'rm -rf "$T"' EXIT
	for f in "${FILES[@]}"; do
		mkdir -p "$T/root$(dirname "${f#*=}")" && cp "${f%%=*}" "$T/root${f#*=}"
	done
	cp "$INITRD" "$T/initrd"
	truncate -s $((($(stat -c %s "$T/initrd") + 3) / 4 * 4)) "$T/initrd"
	(cd "$T/root" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) >>"$T/initrd"
	INITRD=$T/initrd
fi
echo "kernel $KERNEL, gdb stub 127.0.0.1:${GDBPORT:-1234}, System.map $O/System.map" >&2
qemu-system-x86_64 -accel tcg -cpu qemu64 -m 512M -smp "${CPUS:-1}" -nodefaults -no-user-config \
	-display none -no-reboot -kernel "$KERNEL" -initrd "$INITRD" \
	-append "$APPEND $KASLR $SHELLARG ${EXTRA_CMDLINE:-}" \
	-serial mon:stdio -gdb "tcp:127.0.0.1:${GDBPORT:-1234}" "$@"
