package xenlab

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Options configure one boot.
type Options struct {
	// Extra files for dom0: destination path in dom0 -> host file. They go
	// into a second initramfs archive appended to dom0's, so they can add
	// to or replace files of the built one (modes are kept).
	Extra map[string]string
	// DomUs is how many PV domUs (domu1, domu2, ...) Boot creates and waits
	// for; 0 means 1, a negative number none.
	DomUs int
	// DomUMemory is each domU's memory in MiB; default 128.
	DomUMemory int
	// Memory is the machine's RAM, QEMU -m syntax; default "2048M".
	Memory string
	// Dom0Memory is dom0's fixed memory, Xen dom0_mem syntax; default "512M".
	Dom0Memory string
	// CPUs is the number of QEMU CPUs, which are also dom0's vCPUs; default 2.
	CPUs int
	// CPU is the QEMU -cpu model; default "qemu64,+npt".
	CPU string
	// StockXen boots Debian's own hypervisor (no CONFIG_GDBSX) instead of
	// the rebuilt one.
	StockXen bool
	// XenCmdline and Dom0Cmdline are appended to the hypervisor's and
	// dom0's command lines.
	XenCmdline, Dom0Cmdline string
	// ExtraArgs are appended to QEMU's command line.
	ExtraArgs []string
	// LogPath, if set, receives a copy of the serial log as it comes.
	LogPath string
	// BootTimeout bounds the boot up to dom0's command loop; default 240s.
	// Each domU then gets DomUTimeout (default 180s) to come up.
	BootTimeout, DomUTimeout time.Duration
}

// Timings of one boot, from QEMU's start.
type Timings struct {
	Dom0Booted   time.Duration // dom0's init ran ("XLAB DOM0 BOOTED")
	Dom0Ready    time.Duration // toolstack up, dom0 command loop ready
	DomUsCreated time.Duration // every `xl create` returned
	DomUsReady   time.Duration // every domU's command loop ready (Boot returned)
}

// VM is one running Xen machine.
type VM struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	tmpDir  string
	dir     string
	xenArgs string
	d0Args  string
	started time.Time
	timings Timings

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on every new line or exit
	lines    []string      // complete serial lines, "\r" removed
	partial  []byte
	raw      bytes.Buffer
	stderr   bytes.Buffer
	exited   bool
	exitErr  error
	waitNext int
	logFile  *os.File
	domids   map[string]int
	domuMem  int
	domuWait time.Duration

	runMu    sync.Mutex // one command on the serial line at a time
	seq      int
	retries  int // command lines typed again (lost or garbled on the way)
	killOnce sync.Once
	done     chan struct{}
}

var (
	artMu  sync.Mutex
	artDir string
)

// SourceDir is the folder of build.sh and src/ (this package's folder;
// GPROBES_XENLAB_SRC overrides it).
func SourceDir() string {
	if d := os.Getenv("GPROBES_XENLAB_SRC"); d != "" {
		return d
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "lab/xen"
	}
	return filepath.Dir(file)
}

// Artifacts runs build.sh (once per process; build.sh itself caches across
// processes) and returns the folder holding xen, xen-stock, vmlinuz,
// System.map, dom0-initrd.gz, domU-initrd.gz, gpwork, domu-run, BUILDINFO.
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
		return "", fmt.Errorf("xenlab: %s: %v\n%s", script, err, tail(errb.String(), 40))
	}
	f := strings.Fields(strings.TrimSpace(out.String()))
	if len(f) == 0 {
		return "", fmt.Errorf("xenlab: %s printed no output folder\n%s", script, tail(errb.String(), 40))
	}
	dir := f[len(f)-1]
	for _, n := range []string{"xen", "xen-stock", "vmlinuz", "dom0-initrd.gz", "domU-initrd.gz", "System.map"} {
		if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
			return "", fmt.Errorf("xenlab: build output incomplete: %v", err)
		}
	}
	artDir = dir
	return dir, nil
}

var hostTools = [][2]string{
	{"qemu-system-x86_64", "qemu-system-x86"}, {"cpio", "cpio"}, {"gzip", "gzip"},
	{"gcc", "gcc"}, {"make", "make"}, {"/usr/bin/python3", "python3"}, {"readelf", "binutils"},
	{"nm", "binutils"}, {"flock", "util-linux"}, {"sha256sum", "coreutils"}, {"apt-get", "apt"},
	{"dpkg-deb", "dpkg"}, {"dpkg-source", "dpkg-dev"}, {"ldd", "libc-bin"}, {"tar", "tar"},
	{"xz", "xz-utils"}, {"bash", "bash"},
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
		return fmt.Errorf("xenlab: needs linux/amd64, have %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	cmds, pkgs := missingTools()
	if len(cmds) == 0 {
		return nil
	}
	if os.Geteuid() == 0 && (os.Getenv("CI") == "true" || os.Getenv("GPROBES_LAB_INSTALL") == "1") {
		out, err := exec.Command("bash", filepath.Join(SourceDir(), "build.sh"), "--deps").CombinedOutput()
		if err != nil {
			return fmt.Errorf("xenlab: installing host packages: %v\n%s", err, out)
		}
		if cmds, pkgs = missingTools(); len(cmds) == 0 {
			return nil
		}
	}
	return fmt.Errorf("xenlab: missing %s; as root: apt-get install -y --no-install-recommends %s (or lab/xen/build.sh --deps)",
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

// Boot starts QEMU with Xen, waits for dom0's command loop, then creates
// opts.DomUs PV domUs (domu1, domu2, ...) and waits until each runs its
// command loop. It fails fast, with the serial log in the error, if QEMU
// exits, dom0 panics or a step times out. Cancelling ctx kills the VM at any
// time. Call Kill (or PowerOff) when done.
func Boot(ctx context.Context, opts Options) (*VM, error) {
	dir, err := Artifacts()
	if err != nil {
		return nil, err
	}
	if opts.Memory == "" {
		opts.Memory = "2048M"
	}
	if opts.Dom0Memory == "" {
		opts.Dom0Memory = "512M"
	}
	if opts.CPUs <= 0 {
		opts.CPUs = 2
	}
	if opts.CPU == "" {
		opts.CPU = "qemu64,+npt"
	}
	if opts.DomUs == 0 {
		opts.DomUs = 1
	}
	if opts.DomUMemory <= 0 {
		opts.DomUMemory = 128
	}
	if opts.BootTimeout <= 0 {
		opts.BootTimeout = 240 * time.Second
	}
	if opts.DomUTimeout <= 0 {
		opts.DomUTimeout = 180 * time.Second
	}
	tmp, err := os.MkdirTemp("", "xenlab-")
	if err != nil {
		return nil, err
	}
	initrd := filepath.Join(dir, "dom0-initrd.gz")
	if len(opts.Extra) > 0 {
		initrd = filepath.Join(tmp, "dom0-initrd.gz")
		if err := writeInitrd(initrd, filepath.Join(dir, "dom0-initrd.gz"), opts.Extra); err != nil {
			os.RemoveAll(tmp)
			return nil, err
		}
	}
	xen := filepath.Join(dir, "xen")
	if opts.StockXen {
		xen = filepath.Join(dir, "xen-stock")
	}
	// Xen and dom0's hvc0 share com1. No "noreboot": a Xen or dom0 panic
	// reboots, and -no-reboot turns that into QEMU's exit.
	xenArgs := fmt.Sprintf("console=com1 com1=115200,8n1 dom0_mem=%s,max:%s dom0_max_vcpus=%d",
		opts.Dom0Memory, opts.Dom0Memory, opts.CPUs)
	if opts.XenCmdline != "" {
		xenArgs += " " + opts.XenCmdline
	}
	d0Args := "console=hvc0 earlyprintk=xen quiet panic=1"
	if opts.Dom0Cmdline != "" {
		d0Args += " " + opts.Dom0Cmdline
	}
	for _, s := range []string{xenArgs, d0Args} {
		if strings.Contains(s, ",,") {
			os.RemoveAll(tmp)
			return nil, errors.New("xenlab: ',,' in a command line")
		}
	}
	// QEMU's multiboot -initrd takes "file args,file args"; a literal comma
	// is written ",,".
	esc := func(s string) string { return strings.ReplaceAll(s, ",", ",,") }
	modules := esc(filepath.Join(dir, "vmlinuz")) + " " + esc(d0Args) + "," + esc(initrd)

	vm := &VM{
		tmpDir:   tmp,
		dir:      dir,
		xenArgs:  xenArgs,
		d0Args:   d0Args,
		changed:  make(chan struct{}),
		done:     make(chan struct{}),
		domids:   map[string]int{},
		domuMem:  opts.DomUMemory,
		domuWait: opts.DomUTimeout,
	}
	args := []string{
		"-accel", "tcg", "-cpu", opts.CPU, "-m", opts.Memory, "-smp", strconv.Itoa(opts.CPUs),
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-kernel", xen, "-append", xenArgs, "-initrd", modules,
		"-serial", "stdio",
	}
	args = append(args, opts.ExtraArgs...)
	vm.cmd = exec.Command("qemu-system-x86_64", args...)
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
		return nil, fmt.Errorf("xenlab: start qemu-system-x86_64: %w", err)
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

	fail := func(err error) (*VM, error) {
		vm.Kill()
		return nil, err
	}
	deadline := time.Now().Add(opts.BootTimeout)
	_, _, err = vm.waitLine(ctx, 0, time.Until(deadline), func(l string) bool { return strings.HasPrefix(l, "XLAB DOM0 BOOTED") }, true)
	if err != nil {
		return fail(fmt.Errorf("xenlab: boot to dom0 init: %w", err))
	}
	vm.timings.Dom0Booted = time.Since(vm.started)
	_, idx, err := vm.waitLine(ctx, 0, time.Until(deadline), func(l string) bool { return strings.HasPrefix(l, "XLAB READY dom0") }, true)
	if err != nil {
		return fail(fmt.Errorf("xenlab: boot to dom0 command loop: %w", err))
	}
	vm.timings.Dom0Ready = time.Since(vm.started)
	vm.mu.Lock()
	vm.waitNext = idx + 1
	var warns []string
	for _, l := range vm.lines[:idx] {
		if strings.HasPrefix(l, "XLAB WARN") {
			warns = append(warns, l)
		}
	}
	vm.mu.Unlock()
	if len(warns) > 0 {
		return fail(fmt.Errorf("xenlab: dom0 set-up failed:\n%s\n%s", strings.Join(warns, "\n"), vm.logTail(60)))
	}
	var names []string
	for i := 1; i <= opts.DomUs; i++ {
		names = append(names, fmt.Sprintf("domu%d", i))
	}
	if len(names) > 0 {
		if err := vm.createDomUs(names, opts.DomUMemory); err != nil {
			return fail(err)
		}
	}
	vm.timings.DomUsCreated = time.Since(vm.started)
	for _, name := range names {
		if err := vm.waitDomU(name, opts.DomUTimeout); err != nil {
			return fail(err)
		}
	}
	vm.timings.DomUsReady = time.Since(vm.started)
	return vm, nil
}

// writeInitrd writes base followed by a gzip'ed newc cpio archive of extra
// (Linux unpacks concatenated initramfs archives in order).
func writeInitrd(dst, base string, extra map[string]string) error {
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer out.Close()
	in, err := os.Open(base)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	in.Close()
	if err != nil {
		return err
	}
	zw, _ := gzip.NewWriterLevel(out, gzip.BestSpeed)
	w := &cpioWriter{w: zw, ino: 1 << 20}
	dests := make([]string, 0, len(extra))
	for d := range extra {
		dests = append(dests, d)
	}
	sort.Strings(dests)
	dirs := map[string]bool{".": true, "/": true}
	for _, d := range dests {
		clean := path.Clean("/" + d)
		if clean == "/" {
			return fmt.Errorf("xenlab: bad Extra destination %q", d)
		}
		var parents []string
		for p := path.Dir(clean); !dirs[p]; p = path.Dir(p) {
			parents = append(parents, p)
			dirs[p] = true
		}
		for i := len(parents) - 1; i >= 0; i-- {
			mode := uint32(0o40755)
			if parents[i] == "/tmp" {
				mode = 0o41777
			}
			if err := w.entry(parents[i][1:], mode, nil); err != nil {
				return err
			}
		}
		data, err := os.ReadFile(extra[d])
		if err != nil {
			return fmt.Errorf("xenlab: Extra %s: %w", d, err)
		}
		st, err := os.Stat(extra[d])
		if err != nil {
			return err
		}
		if err := w.entry(clean[1:], 0o100000|uint32(st.Mode().Perm()), data); err != nil {
			return err
		}
	}
	if err := w.entry("TRAILER!!!", 0, nil); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return out.Close()
}

type cpioWriter struct {
	w   io.Writer
	n   int64
	ino int
}

func (c *cpioWriter) write(b []byte) error {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return err
}

func (c *cpioWriter) pad() error {
	if r := c.n % 4; r != 0 {
		return c.write(make([]byte, 4-r))
	}
	return nil
}

// entry writes one newc ("070701") record.
func (c *cpioWriter) entry(name string, mode uint32, data []byte) error {
	c.ino++
	nlink := 1
	if mode&0o170000 == 0o040000 {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		c.ino, mode, 0, 0, nlink, time.Now().Unix(), len(data), 0, 0, 0, 0, len(name)+1, 0)
	if err := c.write([]byte(hdr + name + "\x00")); err != nil {
		return err
	}
	if err := c.pad(); err != nil {
		return err
	}
	if err := c.write(data); err != nil {
		return err
	}
	return c.pad()
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

var panicRe = regexp.MustCompile(`Kernel panic - not syncing|\(XEN\) Panic on CPU|\(XEN\) \*\*\*\*\*\*\*\*\*\*\*\*`)

// waitLine waits for a line at index >= from that satisfies match. With
// bootMode, a dom0 kernel or Xen panic fails at once.
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
			if bootMode && panicRe.MatchString(l) {
				vm.mu.Unlock()
				time.Sleep(time.Second) // let the rest of the message arrive
				return "", -1, fmt.Errorf("panic\n%s", vm.logTail(60))
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

// Dir is the artifacts folder the VM booted from.
func (vm *VM) Dir() string { return vm.dir }

// XenCmdline and Dom0Cmdline are the command lines of this boot.
func (vm *VM) XenCmdline() string  { return vm.xenArgs }
func (vm *VM) Dom0Cmdline() string { return vm.d0Args }

// Timings are the boot's milestones.
func (vm *VM) Timings() Timings { return vm.timings }

// Pid is QEMU's process id.
func (vm *VM) Pid() int { return vm.cmd.Process.Pid }

// Done is closed when QEMU has exited.
func (vm *VM) Done() <-chan struct{} { return vm.done }

// ExitErr is QEMU's exit status once Done is closed.
func (vm *VM) ExitErr() error {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.exitErr
}

// Log is the serial log so far (Xen and dom0 console, "\r" removed),
// followed by QEMU's stderr if any.
func (vm *VM) Log() string {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	s := strings.ReplaceAll(vm.raw.String(), "\r", "")
	if vm.stderr.Len() > 0 {
		s += "\n--- qemu stderr ---\n" + vm.stderr.String()
	}
	return s
}

// DomID is the domain id of a domU created by Boot or CreateDomU, -1 if
// there is none of that name.
func (vm *VM) DomID(name string) int {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if id, ok := vm.domids[name]; ok {
		return id
	}
	return -1
}

// DomUs are the names of the domUs created and not destroyed, sorted.
func (vm *VM) DomUs() []string {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	var names []string
	for n := range vm.domids {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

var nameRe = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`)

// createDomUs creates domUs in parallel (xl create), without waiting for them.
func (vm *VM) createDomUs(names []string, memMiB int) error {
	for _, n := range names {
		if !nameRe.MatchString(n) {
			return fmt.Errorf("xenlab: bad domU name %q", n)
		}
	}
	out, rc, err := vm.Run(fmt.Sprintf("xlab-domu create-many %d %s", memMiB, strings.Join(names, " ")), 180*time.Second)
	if err != nil {
		return err
	}
	if rc != 0 {
		return fmt.Errorf("xenlab: xl create %s: status %d: %s", strings.Join(names, " "), rc, out)
	}
	got := map[string]int{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 2 {
			if id, err := strconv.Atoi(f[1]); err == nil {
				got[f[0]] = id
			}
		}
	}
	vm.mu.Lock()
	defer vm.mu.Unlock()
	for _, n := range names {
		id, ok := got[n]
		if !ok {
			return fmt.Errorf("xenlab: xl create %s: no domid in %q", n, out)
		}
		vm.domids[n] = id
	}
	return nil
}

func (vm *VM) waitDomU(name string, timeout time.Duration) error {
	secs := int(timeout / time.Second)
	out, rc, err := vm.Run(fmt.Sprintf("xlab-domu wait %s %d", name, secs), timeout+30*time.Second)
	if err != nil {
		return err
	}
	if rc != 0 {
		return fmt.Errorf("xenlab: domU %s did not come up: %s", name, out)
	}
	return nil
}

// CreateDomU creates one more PV domU (memMiB 0: the boot's DomUMemory),
// waits for its command loop and returns its domid.
func (vm *VM) CreateDomU(name string, memMiB int) (int, error) {
	if memMiB <= 0 {
		memMiB = vm.domuMem
	}
	if err := vm.createDomUs([]string{name}, memMiB); err != nil {
		return -1, err
	}
	return vm.DomID(name), vm.waitDomU(name, vm.domuWait)
}

// DestroyDomU runs `xl destroy` on a domU and forgets its domid.
func (vm *VM) DestroyDomU(name string) error {
	if !nameRe.MatchString(name) {
		return fmt.Errorf("xenlab: bad domU name %q", name)
	}
	out, rc, err := vm.Run("xl destroy "+name, 60*time.Second)
	if err != nil {
		return err
	}
	if rc != 0 {
		return fmt.Errorf("xenlab: xl destroy %s: status %d: %s", name, rc, out)
	}
	vm.mu.Lock()
	delete(vm.domids, name)
	vm.mu.Unlock()
	return nil
}

// ShellQuote quotes s for a POSIX shell.
func ShellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// RunDomU runs cmd with sh -c in the named domU (stdin /dev/null), through
// dom0's domu-run and the domU's console, and returns its stdout and stderr,
// merged, and its exit status.
func (vm *VM) RunDomU(name, cmd string, timeout time.Duration) (string, int, error) {
	target := name
	if id := vm.DomID(name); id >= 0 {
		target = strconv.Itoa(id)
	} else if !nameRe.MatchString(name) {
		return "", -1, fmt.Errorf("xenlab: bad domU name %q", name)
	}
	secs := int((timeout + time.Second - 1) / time.Second)
	if secs < 1 {
		secs = 1
	}
	out, rc, err := vm.Run(fmt.Sprintf("domu-run -t %d %s %s", secs, target, ShellQuote(cmd)), timeout+30*time.Second)
	if err != nil {
		return out, rc, err
	}
	if rc == 124 || rc == 125 {
		if i := strings.LastIndex(out, "domu-run: "); i >= 0 {
			return out[:i], -1, fmt.Errorf("xenlab: in %s: %s", name, strings.TrimSpace(out[i:]))
		}
	}
	return out, rc, nil
}

// ErrFraming: Run got a different number of output lines than dom0 sent.
var ErrFraming = errors.New("xenlab: garbled command output")

// send types line into the serial port in small paced chunks: Xen's serial
// input ring is small and dom0 may not drain it for a while under TCG.
func (vm *VM) send(line string) error {
	b := []byte(line + "\n")
	for len(b) > 0 {
		n := min(len(b), 16)
		if _, err := vm.stdin.Write(b[:n]); err != nil {
			return err
		}
		b = b[n:]
		if len(b) > 0 {
			time.Sleep(3 * time.Millisecond)
		}
	}
	return nil
}

func checkCmd(cmd string) error {
	if strings.TrimSpace(cmd) == "" {
		return errors.New("xenlab: empty command")
	}
	for _, r := range cmd {
		if r < 0x20 && r != '\t' || r == 0x7f {
			return fmt.Errorf("xenlab: control character %q in command (one line only)", r)
		}
	}
	if len(cmd) > 3800 { // the tty's canonical line holds 4095 bytes
		return errors.New("xenlab: command longer than 3800 bytes")
	}
	return nil
}

// Run runs cmd with busybox sh -c in dom0 (stdin /dev/null; PATH has the
// Xen tools, xl, xenstore-*, gdbsx, domu-run, xlab-domu) and returns its
// stdout and stderr, merged, and its exit status. Commands run one at a
// time. The command line is checksummed and retyped if dom0 got it wrong;
// output lines are framed with a per-command tag, so Xen's own console
// messages, which share the serial line, are left out.
func (vm *VM) Run(cmd string, timeout time.Duration) (string, int, error) {
	if err := checkCmd(cmd); err != nil {
		return "", -1, err
	}
	vm.runMu.Lock()
	defer vm.runMu.Unlock()
	vm.seq++
	tag := fmt.Sprintf("h%d.%d", vm.seq, vm.started.UnixNano()%1000000)
	sum := md5.Sum([]byte(cmd))
	msg := "XLABCMD " + tag + " " + hex.EncodeToString(sum[:]) + " " + cmd
	prefix := "XLAB " + tag + " "
	deadline := time.Now().Add(timeout)

	vm.mu.Lock()
	from := len(vm.lines)
	vm.mu.Unlock()
	if err := vm.send(msg); err != nil {
		return "", -1, err
	}
	// the acknowledgement
	for attempt := 1; ; attempt++ {
		ackWait := min(time.Until(deadline), 20*time.Second)
		line, idx, err := vm.waitLine(context.Background(), from, ackWait, func(l string) bool {
			return strings.HasPrefix(l, prefix+"START") || strings.HasPrefix(l, prefix+"DUP") || strings.HasPrefix(l, prefix+"BAD")
		}, false)
		if err == nil && !strings.HasPrefix(line, prefix+"BAD") {
			break
		}
		if time.Until(deadline) <= 0 || attempt >= 5 || vm.isExited() {
			if err == nil {
				err = errors.New("dom0 rejected the command line " + strconv.Itoa(attempt) + " times")
			}
			return "", -1, fmt.Errorf("xenlab: run %q: %w", cmd, err)
		}
		vm.retries++
		if err == nil {
			from = idx + 1
		} else { // nothing came back: finish whatever partial line dom0 holds
			vm.send("")
		}
		if err := vm.send(msg); err != nil {
			return "", -1, err
		}
	}
	rcRe := regexp.MustCompile(`^` + regexp.QuoteMeta(prefix) + `RC (-?\d+) (\d+) (\d+)$`)
	line, idx, err := vm.waitLine(context.Background(), from, time.Until(deadline), rcRe.MatchString, false)
	if err != nil {
		return "", -1, fmt.Errorf("xenlab: run %q: %w", cmd, err)
	}
	m := rcRe.FindStringSubmatch(line)
	rc, _ := strconv.Atoi(m[1])
	want, _ := strconv.Atoi(m[2])
	vm.mu.Lock()
	lines := append([]string(nil), vm.lines[from:idx]...)
	vm.mu.Unlock()
	out, n := collect(lines, prefix+"O")
	if n != want {
		return out, rc, fmt.Errorf("%w: run %q: got %d lines, dom0 sent %d", ErrFraming, cmd, n, want)
	}
	return out, rc, nil
}

// collect gathers the text of the lines that start with prefix ("XLAB
// <tag> O"). A Xen console message can land in the middle of a dom0 line:
// "XLAB t O abc(XEN) message" + "def"; such a line is put back together.
func collect(lines []string, prefix string) (string, int) {
	var b strings.Builder
	n := 0
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if l != prefix && !strings.HasPrefix(l, prefix+" ") {
			continue
		}
		text := strings.TrimPrefix(strings.TrimPrefix(l, prefix), " ")
		if j := strings.Index(text, "(XEN) "); j >= 0 && i+1 < len(lines) {
			next := lines[i+1]
			if !strings.HasPrefix(next, "XLAB ") && !strings.HasPrefix(next, "(XEN)") {
				text = text[:j] + next
				i++
			}
		}
		b.WriteString(text)
		b.WriteByte('\n')
		n++
	}
	return b.String(), n
}

// Retries is how many times Run had to type a command line again because
// dom0 did not get it intact (Xen's serial input ring is 128 bytes).
func (vm *VM) Retries() int {
	vm.runMu.Lock()
	defer vm.runMu.Unlock()
	return vm.retries
}

func (vm *VM) isExited() bool {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.exited
}

// WaitFor waits for a serial line matching re and returns it. It looks at
// every line after the previous WaitFor match (after dom0's "XLAB READY" at
// first), skipping the framing of Run.
func (vm *VM) WaitFor(re *regexp.Regexp, timeout time.Duration) (string, error) {
	vm.mu.Lock()
	from := vm.waitNext
	vm.mu.Unlock()
	line, idx, err := vm.waitLine(context.Background(), from, timeout, func(l string) bool {
		if strings.HasPrefix(l, "XLAB ") {
			return false
		}
		return re.MatchString(l)
	}, false)
	if err != nil {
		return "", fmt.Errorf("xenlab: waiting for /%s/: %w", re, err)
	}
	vm.mu.Lock()
	if idx+1 > vm.waitNext {
		vm.waitNext = idx + 1
	}
	vm.mu.Unlock()
	return line, nil
}

// PowerOff powers dom0 off (busybox poweroff -f; Xen then powers the machine
// off) and waits for QEMU to exit. On timeout it kills QEMU.
func (vm *VM) PowerOff(timeout time.Duration) error {
	select {
	case <-vm.done:
		return fmt.Errorf("xenlab: poweroff: qemu already exited (%v)", vm.ExitErr())
	default:
	}
	vm.runMu.Lock()
	vm.seq++
	err := vm.send(fmt.Sprintf("XLABCMD p%d - poweroff -f", vm.seq))
	vm.runMu.Unlock()
	if err != nil {
		vm.Kill()
		return fmt.Errorf("xenlab: poweroff: %w", err)
	}
	select {
	case <-vm.done:
		vm.cleanup()
		return nil
	case <-time.After(timeout):
		t := vm.logTail(30)
		vm.Kill()
		return fmt.Errorf("xenlab: poweroff: qemu still running after %v\n%s", timeout, t)
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

func (vm *VM) cleanup() { os.RemoveAll(vm.tmpDir) }
