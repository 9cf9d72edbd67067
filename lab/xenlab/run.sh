#!/bin/bash
# lab/xenlab/run.sh [--stock] [-- QEMU ARGS...]
#
# Boot the Xen lab on this terminal, for a human: Xen's console and a dom0
# shell on the serial line (Ctrl-a x quits QEMU; Ctrl-a Ctrl-a sends one
# Ctrl-a, three of them switch Xen's serial input between dom0 and Xen).
# In dom0: xlab-domu create domu1 && xlab-domu wait domu1; domu-run domu1 gpwork counts 3;
# xl console domu1 (Ctrl-] leaves it); poweroff -f.
# --stock boots Debian's hypervisor (no CONFIG_GDBSX) instead of the rebuilt one.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
O=$("$HERE/build.sh")
XEN=$O/xen
while [ $# -gt 0 ]; do
	case $1 in
	--stock) XEN=$O/xen-stock ;;
	--) shift; break ;;
	*) echo "usage: $0 [--stock] [-- QEMU ARGS...]" >&2; exit 2 ;;
	esac
	shift
done
exec qemu-system-x86_64 -accel tcg -cpu qemu64,+npt -m "${MEM:-2048M}" -smp 2 -nodefaults -no-user-config \
	-display none -no-reboot -serial mon:stdio \
	-kernel "$XEN" -append "console=com1 com1=115200,8n1 dom0_mem=512M,max:512M dom0_max_vcpus=2" \
	-initrd "$O/vmlinuz console=hvc0 earlyprintk=xen quiet panic=1 xenlab.shell,$O/dom0-initrd.gz" "$@"
