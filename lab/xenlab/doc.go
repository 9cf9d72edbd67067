// Package xenlab boots the gprobes Xen lab for tests (named apart from
// the xen backend it exercises): Xen 4.17 rebuilt with
// CONFIG_GDBSX, a Linux PV dom0 running from an initramfs with the xl
// toolstack, and PV domUs running busybox and the gpwork workload, all under
// qemu-system-x86_64 -accel tcg.
//
// Xen's console and dom0's hvc0 share the machine's serial port (com1), which
// is QEMU's stdio, connected to pipes. dom0's init serves one shell command
// per line (src/xlab-serve): VM.Run sends a checksummed command line with a
// unique tag and collects the tagged output lines, ignoring Xen's messages.
// Each domU runs the same loop on its own console; dom0's /bin/domu-run
// speaks it through the domU's console pty (xenconsoled), and VM.RunDomU is
// VM.Run("domu-run ..."). Artifacts are built by build.sh from Debian
// packages and cached under $GPROBES_XENLAB (default
// ~/.cache/gprobes-xenlab). See README.md.
package xenlab
