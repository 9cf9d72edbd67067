#!/bin/bash
# lab/qemu/run.sh [--kaslr] [--bzimage] [--protocol] [-- QEMU ARGS...]
#
# Boot the lab guest on this terminal, for a human: a busybox shell on the
# serial console (Ctrl-a x quits QEMU, Ctrl-a c toggles the QEMU monitor),
# QEMU's GDB stub on 127.0.0.1:${GDBPORT:-1234}. --protocol runs the test
# protocol instead of the shell (type commands blind; see src/init).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
O=$("$HERE/build.sh")
KERNEL=$O/vmlinux APPEND="console=ttyS0 quiet panic=-1 no_timer_check" KASLR=nokaslr SHELLARG=gplab.shell
while [ $# -gt 0 ]; do
	case $1 in
	--kaslr) KASLR= KERNEL=$O/bzImage ;;
	--bzimage) KERNEL=$O/bzImage ;;
	--protocol) SHELLARG= ;;
	--) shift; break ;;
	*) echo "usage: $0 [--kaslr] [--bzimage] [--protocol] [-- QEMU ARGS...]" >&2; exit 2 ;;
	esac
	shift
done
echo "kernel $KERNEL, gdb stub 127.0.0.1:${GDBPORT:-1234}, System.map $O/System.map" >&2
exec qemu-system-x86_64 -accel tcg -cpu qemu64 -m 512M -smp "${CPUS:-1}" -nodefaults -no-user-config \
	-display none -no-reboot -kernel "$KERNEL" -initrd "$O/initramfs.cpio.gz" \
	-append "$APPEND $KASLR $SHELLARG ${EXTRA_CMDLINE:-}" \
	-serial mon:stdio -gdb "tcp:127.0.0.1:${GDBPORT:-1234}" "$@"
