// Package qemulab boots the gprobes QEMU lab guest for tests: a stock Debian 6.1 kernel and a busybox initramfs with the
// gpwork workload, under qemu-system-x86_64 -accel tcg, with QEMU's GDB
// stub on a free local port.
//
// The guest's serial console is QEMU's stdio, connected to pipes: the guest
// init prints "GPLAB READY", then runs one shell command per line it reads
// and frames the result (see src/init). Artifacts are built by build.sh from
// Debian packages and cached under $GPROBES_LAB (default
// ~/.cache/gprobes-qemulab). See docs/qemu-lab.md.
package qemulab

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gprobes/gprobes/lab/labkit"
)

// Options configure one boot.
type Options struct {
	KASLR        bool          // leave KASLR on (default: "nokaslr" on the command line)
	Memory       string        // guest RAM, QEMU -m syntax; default "512M"
	CPUs         int           // vCPUs; default 1
	CPU          string        // QEMU -cpu model; default "qemu64"
	BzImage      bool          // boot bzImage even without KASLR (see below)
	ExtraCmdline string        // appended to the kernel command line
	ExtraArgs    []string      // appended to the QEMU command line
	LogPath      string        // if set, the serial log is also written to this file
	BootTimeout  time.Duration // until "GPLAB READY"; default 10 minutes (a few seconds idle; a timeout says how far it got)
	Files        []File        // added to the guest's root at boot (see File), e.g. a static gprobes
}

// Without KASLR, Boot loads the extracted vmlinux ELF directly through its
// PVH entry point (QEMU -kernel vmlinux): the same kernel at the same
// addresses, without the 2.3 s the bzImage decompressor takes under TCG.
// With KASLR (which the bzImage decompressor performs), or with BzImage set,
// it boots bzImage.

// BaseCmdline is the kernel command line before "nokaslr" and ExtraCmdline.
// panic=-1 with QEMU's -no-reboot makes a guest panic end QEMU at once;
// no_timer_check skips the IO-APIC timer test, which a loaded host makes fail
// under TCG ("IO-APIC + timer doesn't work!" panic).
const BaseCmdline = "console=ttyS0 quiet panic=-1 no_timer_check"

// VM is one running guest.
type VM struct {
	cmd          *exec.Cmd
	stdin        io.WriteCloser
	gdbAddr      string
	qmpPath      string
	tmpDir       string
	dir          string
	kernel       string
	cmdline      string
	bootTime     time.Duration
	stext        uint64
	release      string
	*labkit.QEMU // Pid, Done, ExitErr, Log, LogTail, Kill (SIGKILL; removes the temporary files)

	runMu sync.Mutex // one command on the serial line at a time
	seq   int        // commands sent
}

// SourceDir is the folder of build.sh and src/ (this package's folder;
// GPROBES_LAB_SRC overrides it).
func SourceDir() string { return labkit.SourceDir("GPROBES_LAB_SRC", "lab/qemulab") }

var build = &labkit.Build{
	Name: "qemulab", Dir: SourceDir, Rel: "lab/qemulab",
	Outputs: []string{"bzImage", "initramfs.cpio.gz", "System.map", "vmlinux", "config"},
	// the commands the lab needs, with their Debian packages
	Tools: [][2]string{
		{"qemu-system-x86_64", "qemu-system-x86"}, {"cpio", "cpio"}, {"gzip", "gzip"},
		{"xz", "xz-utils"}, {"zstd", "zstd"}, {"gcc", "gcc"}, {"readelf", "binutils"},
		{"flock", "util-linux"}, {"od", "coreutils"}, {"sha256sum", "coreutils"},
		{"apt-get", "apt"}, {"dpkg-deb", "dpkg"}, {"bash", "bash"},
	},
}

// Artifacts runs build.sh (once per process; build.sh itself caches across
// processes) and returns the folder holding bzImage, System.map, config,
// vmlinux, initramfs.cpio.gz, gpwork and BUILDINFO.
func Artifacts() (string, error) { return build.Artifacts() }

// Available reports whether the lab can run here: nil if qemu-system-x86_64
// and the build tools exist. When they do not and the process is root with
// CI=true or GPROBES_LAB_INSTALL=1, it first installs them (build.sh --deps).
func Available() error { return build.Available() }

// Require skips the test when the lab cannot run here, or fails it when
// CI=true (in CI the lab must run).
func Require(t testing.TB) {
	t.Helper()
	build.Require(t)
}

// Boot starts a guest and waits for its init to print "GPLAB READY". It
// fails fast, with the serial log in the error, if the guest panics, QEMU
// exits or the boot times out. Cancelling ctx kills the VM at any time
// (t.Context() ties the VM to a test). Call Kill (or PowerOff) when done.
func Boot(ctx context.Context, opts Options) (*VM, error) {
	dir, err := Artifacts()
	if err != nil {
		return nil, err
	}
	if opts.Memory == "" {
		opts.Memory = "512M"
	}
	if opts.CPUs <= 0 {
		opts.CPUs = 1
	}
	if opts.CPU == "" {
		opts.CPU = "qemu64"
	}
	if opts.BootTimeout <= 0 {
		opts.BootTimeout = 10 * time.Minute
	}
	cmdline := BaseCmdline
	if !opts.KASLR {
		cmdline += " nokaslr"
	}
	if opts.ExtraCmdline != "" {
		cmdline += " " + opts.ExtraCmdline
	}

	kernel := "vmlinux"
	if opts.KASLR || opts.BzImage {
		kernel = "bzImage"
	}

	tmp, err := os.MkdirTemp("", "gplab-")
	if err != nil {
		return nil, err
	}
	// The GDB stub's listening socket is made here and handed to QEMU as fd 3,
	// so the port is known and free, with no race.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	lnFile, err := ln.(*net.TCPListener).File()
	gdbAddr := ln.Addr().String()
	ln.Close()
	if err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	defer lnFile.Close()

	initrd := filepath.Join(dir, "initramfs.cpio.gz")
	if len(opts.Files) > 0 {
		initrd = filepath.Join(tmp, "initrd")
		if err := writeInitrd(initrd, filepath.Join(dir, "initramfs.cpio.gz"), opts.Files); err != nil {
			os.RemoveAll(tmp)
			return nil, err
		}
	}

	vm := &VM{
		gdbAddr: gdbAddr,
		qmpPath: filepath.Join(tmp, "qmp.sock"),
		tmpDir:  tmp,
		dir:     dir,
		kernel:  kernel,
		cmdline: cmdline,
	}
	args := []string{
		"-accel", "tcg", "-cpu", opts.CPU, "-m", opts.Memory, "-smp", strconv.Itoa(opts.CPUs),
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-kernel", filepath.Join(dir, kernel),
		"-initrd", initrd,
		"-append", cmdline,
		"-serial", "stdio",
		"-qmp", "unix:" + vm.qmpPath + ",server=on,wait=off",
		"-chardev", "socket,id=gdb0,fd=3,server=on,wait=off,nodelay=on",
		"-gdb", "chardev:gdb0",
	}
	args = append(args, opts.ExtraArgs...)
	vm.QEMU, err = labkit.StartQEMU(ctx, labkit.QEMUConfig{Args: args, ExtraFiles: []*os.File{lnFile}, LogPath: opts.LogPath, TmpDir: tmp,
		Panic: regexp.MustCompile(`Kernel panic - not syncing`),
		Milestones: []labkit.Milestone{
			{Name: "the init ran", Re: regexp.MustCompile(`^GPLAB KERNEL`)},
			{Name: "the command loop", Re: regexp.MustCompile(`^GPLAB READY`)},
		}})
	if err != nil {
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("qemulab: %w", err)
	}

	ready := regexp.MustCompile(`^GPLAB READY`)
	_, idx, err := vm.QEMU.WaitLine(ctx, 0, opts.BootTimeout, func(l string) bool { return ready.MatchString(l) }, true)
	if err != nil {
		vm.Kill()
		return nil, fmt.Errorf("qemulab: boot of %s (%s): %w", kernel, cmdline, err)
	}
	vm.bootTime = time.Since(vm.QEMU.Started())
	for _, l := range vm.QEMU.Lines(0, idx) {
		if v, ok := strings.CutPrefix(l, "GPLAB STEXT "); ok {
			vm.stext, _ = strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
		if v, ok := strings.CutPrefix(l, "GPLAB KERNEL "); ok {
			vm.release = strings.TrimSpace(v)
		}
	}
	vm.QEMU.SetWaitMark(idx + 1)
	return vm, nil
}

// GDBAddr is "127.0.0.1:PORT" of QEMU's GDB stub (a port chosen at boot).
func (vm *VM) GDBAddr() string { return vm.gdbAddr }

// QMPPath is the unix socket of QEMU's QMP monitor.
func (vm *VM) QMPPath() string { return vm.qmpPath }

// Dir is the artifacts folder the VM booted from.
func (vm *VM) Dir() string { return vm.dir }

// Kernel is the file booted: "vmlinux" (PVH entry) or "bzImage".
func (vm *VM) Kernel() string { return vm.kernel }

// Cmdline is the kernel command line of this boot.
func (vm *VM) Cmdline() string { return vm.cmdline }

// BootTime is the wall time from starting QEMU to "GPLAB READY".
func (vm *VM) BootTime() time.Duration { return vm.bootTime }

// KernelRelease is the guest's `uname -r`.
func (vm *VM) KernelRelease() string { return vm.release }

// Stext is the run-time address of _stext that the guest read from
// /proc/kallsyms at boot (0 if it could not).
func (vm *VM) Stext() uint64 { return vm.stext }

// Slide is the KASLR displacement of the kernel text: the guest's _stext
// minus System.map's (0 with nokaslr).
func (vm *VM) Slide() (int64, error) {
	m, err := Symbol("_stext")
	if err != nil {
		return 0, err
	}
	if vm.stext == 0 {
		return 0, errors.New("qemulab: the guest did not report _stext")
	}
	return int64(vm.stext - m), nil
}

var kernelErrorRe = regexp.MustCompile(`Kernel panic|BUG:|Oops|general protection fault|WARNING:|Call Trace:|kernel BUG|soft lockup|hung_task|RIP: 0010:`)

// KernelErrors are the serial lines so far that look like kernel trouble
// (panic, BUG, Oops, WARNING, call traces, lockups): empty on a healthy guest.
func (vm *VM) KernelErrors() []string {
	var out []string
	for _, l := range vm.QEMU.Lines(0, -1) {
		if strings.HasPrefix(l, "GPLAB OUT") {
			continue
		}
		if kernelErrorRe.MatchString(l) {
			out = append(out, l)
		}
	}
	return out
}

var rcLine = regexp.MustCompile(`^GPLAB RC (-?\d+) (\d+)$`)

func (vm *VM) send(line string) error {
	if strings.ContainsAny(line, "\n\r") {
		return errors.New("qemulab: a command is one line")
	}
	for _, r := range line {
		if r < 0x20 && r != '\t' || r == 0x7f {
			return fmt.Errorf("qemulab: control character %q in command", r)
		}
	}
	if len(line) > 4000 { // the tty's canonical line holds 4095 bytes
		return errors.New("qemulab: command longer than 4000 bytes")
	}
	_, err := io.WriteString(vm.QEMU.Stdin(), line+"\n")
	return err
}

// Run runs cmd with busybox sh -c in the guest (stdin /dev/null) and returns
// its stdout and stderr, merged, and its exit status. Commands run one at a
// time; a background job's output is not part of it (see WaitFor).
func (vm *VM) Run(cmd string, timeout time.Duration) (string, int, error) {
	if strings.TrimSpace(cmd) == "poweroff" {
		return "", -1, errors.New("qemulab: use PowerOff")
	}
	vm.runMu.Lock()
	defer vm.runMu.Unlock()
	from := vm.QEMU.NumLines()
	if err := vm.send(cmd); err != nil {
		return "", -1, err
	}
	vm.seq++
	want := strconv.Itoa(vm.seq)
	line, idx, err := vm.QEMU.WaitLine(context.Background(), from, timeout, func(l string) bool {
		m := rcLine.FindStringSubmatch(l)
		return m != nil && m[2] == want
	}, false)
	if err != nil {
		return "", -1, fmt.Errorf("qemulab: run %q: %w", cmd, err)
	}
	rc, _ := strconv.Atoi(rcLine.FindStringSubmatch(line)[1])
	// The output is the "GPLAB OUT" lines since the previous RC line.
	lines := vm.QEMU.Lines(from, idx)
	start := 0
	for i := len(lines) - 1; i >= 0; i-- {
		if rcLine.MatchString(lines[i]) {
			start = i + 1
			break
		}
	}
	var b strings.Builder
	for _, l := range lines[start:] {
		if v, ok := strings.CutPrefix(l, "GPLAB OUT "); ok {
			b.WriteString(v)
			b.WriteByte('\n')
		} else if l == "GPLAB OUT" {
			b.WriteByte('\n')
		}
	}
	return b.String(), rc, nil
}

// Start runs cmd in the background in the guest, its output going straight to
// the console (read it with WaitFor), and returns once the guest has started it.
func (vm *VM) Start(cmd string) error {
	out, rc, err := vm.Run("("+cmd+") </dev/null >/dev/console 2>&1 &", 30*time.Second)
	if err != nil {
		return err
	}
	if rc != 0 {
		return fmt.Errorf("qemulab: start %q: status %d: %s", cmd, rc, out)
	}
	return nil
}

// WaitFor waits for a serial line matching re and returns it. It looks at
// every line after the previous WaitFor match (after "GPLAB READY" at first),
// skipping the framed output of Run ("GPLAB OUT", "GPLAB RC").
func (vm *VM) WaitFor(re *regexp.Regexp, timeout time.Duration) (string, error) {
	line, err := vm.QEMU.WaitFor(re, timeout, func(l string) bool {
		return strings.HasPrefix(l, "GPLAB OUT") || rcLine.MatchString(l)
	})
	if err != nil {
		return "", fmt.Errorf("qemulab: %w", err)
	}
	return line, nil
}

// PowerOff asks the guest to power off (busybox poweroff -f) and waits for
// QEMU to exit. On timeout it kills QEMU and reports the error.
func (vm *VM) PowerOff(timeout time.Duration) error {
	err := vm.QEMU.PowerOff(func() error {
		vm.runMu.Lock()
		defer vm.runMu.Unlock()
		return vm.send("poweroff")
	}, timeout)
	if err != nil {
		return fmt.Errorf("qemulab: %w", err)
	}
	return nil
}

// HMP runs a human monitor command (e.g. "info status", "info registers")
// through QEMU's QMP socket and returns its output.
func (vm *VM) HMP(command string, timeout time.Duration) (string, error) {
	conn, err := net.DialTimeout("unix", vm.qmpPath, timeout)
	if err != nil {
		return "", fmt.Errorf("qemulab: qmp: %w", err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(timeout))
	dec := json.NewDecoder(conn)
	var greeting map[string]any
	if err := dec.Decode(&greeting); err != nil {
		return "", fmt.Errorf("qemulab: qmp greeting: %w", err)
	}
	reply := func(req any) (json.RawMessage, error) {
		if err := json.NewEncoder(conn).Encode(req); err != nil {
			return nil, err
		}
		for {
			var m struct {
				Return json.RawMessage `json:"return"`
				Error  *struct {
					Class, Desc string
				} `json:"error"`
				Event string `json:"event"`
			}
			if err := dec.Decode(&m); err != nil {
				return nil, err
			}
			if m.Event != "" {
				continue
			}
			if m.Error != nil {
				return nil, fmt.Errorf("%s: %s", m.Error.Class, m.Error.Desc)
			}
			return m.Return, nil
		}
	}
	if _, err := reply(map[string]any{"execute": "qmp_capabilities"}); err != nil {
		return "", fmt.Errorf("qemulab: qmp: %w", err)
	}
	r, err := reply(map[string]any{"execute": "human-monitor-command",
		"arguments": map[string]any{"command-line": command}})
	if err != nil {
		return "", fmt.Errorf("qemulab: hmp %q: %w", command, err)
	}
	var s string
	if err := json.Unmarshal(r, &s); err != nil {
		return "", err
	}
	return s, nil
}

// Resume continues a guest that a GDB client left stopped (QEMU 7.2 does
// not resume the VM when a stub client disconnects without detaching).
func (vm *VM) Resume() error {
	_, err := vm.HMP("cont", 10*time.Second)
	return err
}

var (
	mapMu   sync.Mutex
	mapSyms map[string]uint64
)

// Symbol is the address of a kernel symbol in the artifacts' System.map
// (link-time, i.e. without the KASLR slide).
func Symbol(name string) (uint64, error) {
	mapMu.Lock()
	defer mapMu.Unlock()
	if mapSyms == nil {
		dir, err := Artifacts()
		if err != nil {
			return 0, err
		}
		f, err := os.Open(filepath.Join(dir, "System.map"))
		if err != nil {
			return 0, err
		}
		defer f.Close()
		syms := map[string]uint64{}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 3 {
				continue
			}
			a, err := strconv.ParseUint(fs[0], 16, 64)
			if err != nil {
				continue
			}
			if _, dup := syms[fs[2]]; !dup {
				syms[fs[2]] = a
			}
		}
		if err := sc.Err(); err != nil {
			return 0, err
		}
		mapSyms = syms
	}
	a, ok := mapSyms[name]
	if !ok {
		return 0, fmt.Errorf("qemulab: %s not in System.map", name)
	}
	return a, nil
}

var lines struct {
	once sync.Once
	path string
	err  error
}

// LineVmlinux returns the guest kernel's vmlinux with its DWARF line
// tables (dbg-vmlinux.sh: from Debian's linux-image-KVER-dbg, reduced to
// the symbol table and what line lookups read, 230 MB; cached beside the
// lab's kernel). It downloads about 860 MB the first time.
func LineVmlinux() (string, error) {
	lines.once.Do(func() {
		dir, err := Artifacts()
		if err != nil {
			lines.err = err
			return
		}
		var out, errb bytes.Buffer
		c := exec.Command("bash", filepath.Join(SourceDir(), "dbg-vmlinux.sh"), dir)
		c.Stdout, c.Stderr = &out, &errb
		if err := c.Run(); err != nil {
			lines.err = fmt.Errorf("qemulab: dbg-vmlinux.sh: %v\n%s", err, labkit.Tail(errb.String(), 20))
			return
		}
		f := strings.Fields(out.String())
		if len(f) == 0 {
			lines.err = fmt.Errorf("qemulab: dbg-vmlinux.sh printed no file\n%s", labkit.Tail(errb.String(), 20))
			return
		}
		lines.path = f[len(f)-1]
	})
	return lines.path, lines.err
}
