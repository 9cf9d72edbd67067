// Package qemulab boots the gprobes QEMU lab guest for tests: a stock Debian
// 6.1 kernel and a busybox initramfs with the gpwork workload, under
// qemu-system-x86_64 -accel tcg, with QEMU's GDB stub on a free local port.
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
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
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
	BootTimeout  time.Duration // until "GPLAB READY"; default 180s
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
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	gdbAddr  string
	qmpPath  string
	tmpDir   string
	dir      string
	kernel   string
	cmdline  string
	started  time.Time
	bootTime time.Duration
	stext    uint64
	release  string

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on every new line or exit
	lines    []string      // complete serial lines, "\r" removed
	partial  []byte
	raw      bytes.Buffer // the serial log
	stderr   bytes.Buffer // QEMU's own messages
	exited   bool
	exitErr  error
	waitNext int // first line WaitFor has not looked at
	logFile  *os.File

	runMu    sync.Mutex // one command on the serial line at a time
	seq      int        // commands sent
	killOnce sync.Once
	done     chan struct{} // closed when QEMU has exited and been reaped
}

var (
	artMu  sync.Mutex
	artDir string
)

// SourceDir is the folder of build.sh and src/ (this package's folder;
// GPROBES_LAB_SRC overrides it).
func SourceDir() string {
	if d := os.Getenv("GPROBES_LAB_SRC"); d != "" {
		return d
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "lab/qemu"
	}
	return filepath.Dir(file)
}

// Artifacts runs build.sh (once per process; build.sh itself caches across
// processes) and returns the folder holding bzImage, System.map, config,
// vmlinux, initramfs.cpio.gz, gpwork and BUILDINFO.
func Artifacts() (string, error) {
	artMu.Lock()
	defer artMu.Unlock()
	if artDir != "" {
		return artDir, nil
	}
	script := filepath.Join(SourceDir(), "build.sh")
	var out, errb bytes.Buffer
	c := exec.Command("bash", script)
	c.Stdout = &out
	c.Stderr = &errb
	if err := c.Run(); err != nil {
		return "", fmt.Errorf("qemulab: %s: %v\n%s", script, err, tail(errb.String(), 40))
	}
	lines := strings.Fields(strings.TrimSpace(out.String()))
	if len(lines) == 0 {
		return "", fmt.Errorf("qemulab: %s printed no output folder\n%s", script, tail(errb.String(), 40))
	}
	dir := lines[len(lines)-1]
	for _, f := range []string{"bzImage", "initramfs.cpio.gz", "System.map", "vmlinux", "config"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return "", fmt.Errorf("qemulab: build output incomplete: %v", err)
		}
	}
	artDir = dir
	return dir, nil
}

// hostTools are the commands the lab needs, with their Debian packages.
var hostTools = [][2]string{
	{"qemu-system-x86_64", "qemu-system-x86"}, {"cpio", "cpio"}, {"gzip", "gzip"},
	{"xz", "xz-utils"}, {"zstd", "zstd"}, {"gcc", "gcc"}, {"readelf", "binutils"},
	{"flock", "util-linux"}, {"od", "coreutils"}, {"sha256sum", "coreutils"},
	{"apt-get", "apt"}, {"dpkg-deb", "dpkg"}, {"bash", "bash"},
}

func missingTools() (cmds, pkgs []string) {
	seen := map[string]bool{}
	for _, t := range hostTools {
		if _, err := exec.LookPath(t[0]); err != nil {
			cmds = append(cmds, t[0])
			if !seen[t[1]] {
				seen[t[1]] = true
				pkgs = append(pkgs, t[1])
			}
		}
	}
	if _, err := os.Stat("/usr/lib/x86_64-linux-gnu/libc.a"); err != nil {
		cmds = append(cmds, "libc.a")
		pkgs = append(pkgs, "libc6-dev")
	}
	return cmds, pkgs
}

// Available reports whether the lab can run here: nil if qemu-system-x86_64
// and the build tools exist. When they do not and the process is root with
// CI=true or GPROBES_LAB_INSTALL=1, it first installs them (build.sh --deps).
func Available() error {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		return fmt.Errorf("qemulab: needs linux/amd64, have %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	cmds, pkgs := missingTools()
	if len(cmds) == 0 {
		return nil
	}
	if os.Geteuid() == 0 && (os.Getenv("CI") == "true" || os.Getenv("GPROBES_LAB_INSTALL") == "1") {
		c := exec.Command("bash", filepath.Join(SourceDir(), "build.sh"), "--deps")
		out, err := c.CombinedOutput()
		if err != nil {
			return fmt.Errorf("qemulab: installing host packages: %v\n%s", err, out)
		}
		if cmds, pkgs = missingTools(); len(cmds) == 0 {
			return nil
		}
	}
	return fmt.Errorf("qemulab: missing %s; as root: apt-get install -y --no-install-recommends %s (or lab/qemu/build.sh --deps)",
		strings.Join(cmds, ", "), strings.Join(pkgs, " "))
}

// Require skips the test when the lab cannot run here, or fails it when
// CI=true (in CI the lab must run).
func Require(t testing.TB) {
	t.Helper()
	if err := Available(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
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
		opts.BootTimeout = 180 * time.Second
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

	vm := &VM{
		gdbAddr: gdbAddr,
		qmpPath: filepath.Join(tmp, "qmp.sock"),
		tmpDir:  tmp,
		dir:     dir,
		kernel:  kernel,
		cmdline: cmdline,
		changed: make(chan struct{}),
		done:    make(chan struct{}),
	}
	args := []string{
		"-accel", "tcg", "-cpu", opts.CPU, "-m", opts.Memory, "-smp", strconv.Itoa(opts.CPUs),
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-kernel", filepath.Join(dir, kernel),
		"-initrd", filepath.Join(dir, "initramfs.cpio.gz"),
		"-append", cmdline,
		"-serial", "stdio",
		"-qmp", "unix:" + vm.qmpPath + ",server=on,wait=off",
		"-chardev", "socket,id=gdb0,fd=3,server=on,wait=off,nodelay=on",
		"-gdb", "chardev:gdb0",
	}
	args = append(args, opts.ExtraArgs...)
	vm.cmd = exec.Command("qemu-system-x86_64", args...)
	vm.cmd.ExtraFiles = []*os.File{lnFile}
	dieWithParent(vm.cmd)
	vm.cmd.Stderr = &lockedWriter{vm: vm}
	stdout, err := vm.cmd.StdoutPipe()
	if err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	if vm.stdin, err = vm.cmd.StdinPipe(); err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	if opts.LogPath != "" {
		if vm.logFile, err = os.Create(opts.LogPath); err != nil {
			os.RemoveAll(tmp)
			return nil, err
		}
	}
	vm.started = time.Now()
	if err := vm.cmd.Start(); err != nil {
		os.RemoveAll(tmp)
		if vm.logFile != nil {
			vm.logFile.Close()
		}
		return nil, fmt.Errorf("qemulab: start qemu-system-x86_64: %w", err)
	}
	readerDone := make(chan struct{})
	go vm.readSerial(stdout, readerDone)
	go func() {
		<-readerDone
		err := vm.cmd.Wait()
		vm.mu.Lock()
		vm.exited = true
		vm.exitErr = err
		vm.notifyLocked()
		vm.mu.Unlock()
		if vm.logFile != nil {
			vm.logFile.Close()
		}
		close(vm.done)
	}()
	go func() {
		select {
		case <-ctx.Done():
			vm.Kill()
		case <-vm.done:
		}
	}()

	ready := regexp.MustCompile(`^GPLAB READY`)
	_, idx, err := vm.waitLine(ctx, 0, opts.BootTimeout, func(l string) bool { return ready.MatchString(l) }, true)
	if err != nil {
		vm.Kill()
		return nil, fmt.Errorf("qemulab: boot of %s (%s): %w", kernel, cmdline, err)
	}
	vm.bootTime = time.Since(vm.started)
	vm.mu.Lock()
	for _, l := range vm.lines[:idx] {
		if v, ok := strings.CutPrefix(l, "GPLAB STEXT "); ok {
			vm.stext, _ = strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
		if v, ok := strings.CutPrefix(l, "GPLAB KERNEL "); ok {
			vm.release = strings.TrimSpace(v)
		}
	}
	vm.waitNext = idx + 1
	vm.mu.Unlock()
	return vm, nil
}

type lockedWriter struct{ vm *VM }

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.vm.mu.Lock()
	defer w.vm.mu.Unlock()
	w.vm.stderr.Write(p)
	return len(p), nil
}

func (vm *VM) notifyLocked() {
	close(vm.changed)
	vm.changed = make(chan struct{})
}

func (vm *VM) readSerial(r io.Reader, done chan struct{}) {
	defer close(done)
	br := bufio.NewReaderSize(r, 64<<10)
	buf := make([]byte, 32<<10)
	for {
		n, err := br.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			vm.mu.Lock()
			vm.raw.Write(chunk)
			if vm.logFile != nil {
				vm.logFile.Write(chunk)
			}
			for len(chunk) > 0 {
				i := bytes.IndexByte(chunk, '\n')
				if i < 0 {
					vm.partial = append(vm.partial, chunk...)
					break
				}
				vm.partial = append(vm.partial, chunk[:i]...)
				vm.lines = append(vm.lines, strings.ReplaceAll(string(vm.partial), "\r", ""))
				vm.partial = vm.partial[:0]
				chunk = chunk[i+1:]
			}
			vm.notifyLocked()
			vm.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

// waitLine waits for a line at index >= from that satisfies match. With
// bootMode, a kernel panic line fails at once.
func (vm *VM) waitLine(ctx context.Context, from int, timeout time.Duration, match func(string) bool, bootMode bool) (string, int, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		vm.mu.Lock()
		for i := from; i < len(vm.lines); i++ {
			l := vm.lines[i]
			if match(l) {
				vm.mu.Unlock()
				return l, i, nil
			}
			if bootMode && strings.Contains(l, "Kernel panic - not syncing") {
				vm.mu.Unlock()
				// let the rest of the panic message arrive
				time.Sleep(500 * time.Millisecond)
				return "", -1, fmt.Errorf("guest kernel panic\n%s", vm.logTail(60))
			}
		}
		from = len(vm.lines)
		if vm.exited {
			err := vm.exitErr
			vm.mu.Unlock()
			return "", -1, fmt.Errorf("qemu exited (%v)\n%s", err, vm.logTail(60))
		}
		ch := vm.changed
		vm.mu.Unlock()
		select {
		case <-ch:
		case <-timer.C:
			return "", -1, fmt.Errorf("timeout after %v\n%s", timeout, vm.logTail(60))
		case <-ctx.Done():
			return "", -1, fmt.Errorf("%w\n%s", ctx.Err(), vm.logTail(60))
		}
	}
}

// logTail is the end of the serial log and QEMU's stderr, for errors.
func (vm *VM) logTail(n int) string {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	s := "--- serial log (tail) ---\n" + tail(vm.raw.String(), n)
	if vm.stderr.Len() > 0 {
		s += "\n--- qemu stderr ---\n" + tail(vm.stderr.String(), 20)
	}
	return s
}

func tail(s string, n int) string {
	s = strings.ReplaceAll(s, "\r", "")
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
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

// Pid is QEMU's process id.
func (vm *VM) Pid() int { return vm.cmd.Process.Pid }

// Done is closed when QEMU has exited.
func (vm *VM) Done() <-chan struct{} { return vm.done }

// ExitErr is QEMU's exit status once Done is closed (nil for a clean exit,
// which is what a guest poweroff gives).
func (vm *VM) ExitErr() error {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.exitErr
}

// Log is the serial log so far ("\r" removed), followed by QEMU's stderr if any.
func (vm *VM) Log() string {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	s := strings.ReplaceAll(vm.raw.String(), "\r", "")
	if vm.stderr.Len() > 0 {
		s += "\n--- qemu stderr ---\n" + vm.stderr.String()
	}
	return s
}

var kernelErrorRe = regexp.MustCompile(`Kernel panic|BUG:|Oops|general protection fault|WARNING:|Call Trace:|kernel BUG|soft lockup|hung_task|RIP: 0010:`)

// KernelErrors are the serial lines so far that look like kernel trouble
// (panic, BUG, Oops, WARNING, call traces, lockups): empty on a healthy guest.
func (vm *VM) KernelErrors() []string {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	var out []string
	for _, l := range vm.lines {
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
	_, err := io.WriteString(vm.stdin, line+"\n")
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
	vm.mu.Lock()
	from := len(vm.lines)
	vm.mu.Unlock()
	if err := vm.send(cmd); err != nil {
		return "", -1, err
	}
	vm.seq++
	want := strconv.Itoa(vm.seq)
	line, idx, err := vm.waitLine(context.Background(), from, timeout, func(l string) bool {
		m := rcLine.FindStringSubmatch(l)
		return m != nil && m[2] == want
	}, false)
	if err != nil {
		return "", -1, fmt.Errorf("qemulab: run %q: %w", cmd, err)
	}
	rc, _ := strconv.Atoi(rcLine.FindStringSubmatch(line)[1])
	// The output is the "GPLAB OUT" lines since the previous RC line.
	vm.mu.Lock()
	start := from
	for i := idx - 1; i >= from; i-- {
		if rcLine.MatchString(vm.lines[i]) {
			start = i + 1
			break
		}
	}
	var b strings.Builder
	for _, l := range vm.lines[start:idx] {
		if v, ok := strings.CutPrefix(l, "GPLAB OUT "); ok {
			b.WriteString(v)
			b.WriteByte('\n')
		} else if l == "GPLAB OUT" {
			b.WriteByte('\n')
		}
	}
	vm.mu.Unlock()
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
	vm.mu.Lock()
	from := vm.waitNext
	vm.mu.Unlock()
	line, idx, err := vm.waitLine(context.Background(), from, timeout, func(l string) bool {
		if strings.HasPrefix(l, "GPLAB OUT") || rcLine.MatchString(l) {
			return false
		}
		return re.MatchString(l)
	}, false)
	if err != nil {
		return "", fmt.Errorf("qemulab: waiting for /%s/: %w", re, err)
	}
	vm.mu.Lock()
	if idx+1 > vm.waitNext {
		vm.waitNext = idx + 1
	}
	vm.mu.Unlock()
	return line, nil
}

// PowerOff asks the guest to power off (busybox poweroff -f) and waits for
// QEMU to exit. On timeout it kills QEMU and reports the error.
func (vm *VM) PowerOff(timeout time.Duration) error {
	select {
	case <-vm.done:
		return fmt.Errorf("qemulab: poweroff: qemu already exited (%v)", vm.ExitErr())
	default:
	}
	vm.runMu.Lock()
	err := vm.send("poweroff")
	vm.runMu.Unlock()
	if err != nil {
		vm.Kill()
		return fmt.Errorf("qemulab: poweroff: %w", err)
	}
	select {
	case <-vm.done:
		vm.cleanup()
		if e := vm.ExitErr(); e != nil {
			return fmt.Errorf("qemulab: poweroff: qemu exit: %v\n%s", e, vm.logTail(30))
		}
		return nil
	case <-time.After(timeout):
		tailLog := vm.logTail(30)
		vm.Kill()
		return fmt.Errorf("qemulab: poweroff: qemu still running after %v\n%s", timeout, tailLog)
	}
}

// Kill ends QEMU (SIGKILL) and removes the VM's temporary files. Safe to call
// more than once and after PowerOff.
func (vm *VM) Kill() {
	vm.killOnce.Do(func() {
		select {
		case <-vm.done:
		default:
			vm.cmd.Process.Kill()
			select {
			case <-vm.done:
			case <-time.After(10 * time.Second):
			}
		}
	})
	vm.cleanup()
}

func (vm *VM) cleanup() {
	os.RemoveAll(vm.tmpDir)
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
