package xenlab

import (
	"compress/gzip"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gprobes/gprobes/lab/labkit"
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
	// DomUVCPUs is each domU's vCPUs (the domU config's vcpus, for the
	// domUs of the boot and CreateDomU's); default 1.
	DomUVCPUs int
	// Memory is the machine's RAM, QEMU -m syntax; default "2048M".
	Memory string
	// Dom0Memory is dom0's fixed memory, Xen dom0_mem syntax; default "512M".
	Dom0Memory string
	// CPUs is the number of QEMU CPUs, which are also dom0's vCPUs; default 2.
	CPUs int
	// CPU is the QEMU -cpu model; default "qemu64,+npt".
	CPU string
	// QEMU is the QEMU to run; nil: the system's qemu-system-x86_64.
	// BackportsQEMU gives Debian's 10.0 from bookworm-backports.
	QEMU *QEMUBinary
	// StockXen boots Debian's own hypervisor (no CONFIG_GDBSX) instead of
	// the rebuilt one.
	StockXen bool
	// CR2Sync boots xen-cr2sync, the rebuilt hypervisor with
	// src/xen-svm-cr2.patch, which an HVM or PVH guest needs under QEMU
	// 10.0's TCG (BackportsQEMU): that QEMU reports a guest's read of CR2
	// as a CR0 read, which Xen emulates from a copy of CR2 the patch keeps
	// current. Not with StockXen.
	CR2Sync bool
	// XenCmdline and Dom0Cmdline are appended to the hypervisor's and
	// dom0's command lines.
	XenCmdline, Dom0Cmdline string
	// ExtraArgs are appended to QEMU's command line.
	ExtraArgs []string
	// LogPath, if set, receives a copy of the serial log as it comes.
	LogPath string
	// BootTimeout bounds the boot up to dom0's command loop; default 10
	// minutes: about 35 s on an idle 2-CPU host under TCG, several times
	// that on a loaded one. Each domU then gets DomUTimeout (default 5
	// minutes) to come up. A boot that times out says how far it got
	// (bootMilestones) and shows the serial log's end.
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
	dir          string
	xenArgs      string
	d0Args       string
	timings      Timings
	*labkit.QEMU // Pid, Done, ExitErr, Log, LogTail, Kill (SIGKILL; removes the temporary files)

	mu       sync.Mutex // guards domids
	domids   map[string]int
	domuMem  int
	domuWait time.Duration

	runMu   sync.Mutex // one command on the serial line at a time
	seq     int
	retries int // command lines typed again (lost or garbled on the way)
}

// SourceDir is the folder of build.sh and src/ (this package's folder;
// GPROBES_XENLAB_SRC overrides it).
func SourceDir() string { return labkit.SourceDir("GPROBES_XENLAB_SRC", "lab/xenlab") }

var build = &labkit.Build{
	Name: "xenlab", Dir: SourceDir, Rel: "lab/xenlab",
	Outputs: []string{"xen", "xen-cr2sync", "xen-stock", "vmlinuz", "dom0-initrd.gz", "domU-initrd.gz", "System.map"},
	Tools: [][2]string{
		{"qemu-system-x86_64", "qemu-system-x86"}, {"cpio", "cpio"}, {"gzip", "gzip"},
		{"gcc", "gcc"}, {"make", "make"}, {"/usr/bin/python3", "python3"}, {"readelf", "binutils"},
		{"nm", "binutils"}, {"flock", "util-linux"}, {"sha256sum", "coreutils"}, {"apt-get", "apt"},
		{"dpkg-deb", "dpkg"}, {"dpkg-source", "dpkg-dev"}, {"ldd", "libc-bin"}, {"tar", "tar"},
		{"xz", "xz-utils"}, {"bash", "bash"},
	},
}

// Artifacts runs build.sh (once per process; build.sh itself caches across
// processes) and returns the folder holding xen, xen-cr2sync, xen-stock,
// vmlinuz, System.map, dom0-initrd.gz, domU-initrd.gz, gpwork, domu-run,
// BUILDINFO.
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
		opts.BootTimeout = 10 * time.Minute
	}
	if opts.DomUTimeout <= 0 {
		opts.DomUTimeout = 5 * time.Minute
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
	if opts.CR2Sync {
		if opts.StockXen {
			os.RemoveAll(tmp)
			return nil, errors.New("xenlab: CR2Sync and StockXen")
		}
		xen = filepath.Join(dir, "xen-cr2sync")
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
		dir:      dir,
		xenArgs:  xenArgs,
		d0Args:   d0Args,
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
	cfg := labkit.QEMUConfig{Args: args, LogPath: opts.LogPath, TmpDir: tmp, Panic: panicRe, Milestones: bootMilestones}
	if q := opts.QEMU; q != nil {
		cfg.Binary, cfg.Env = q.Path, q.Env
		cfg.Args = append(append([]string(nil), q.Args...), args...)
	}
	vm.QEMU, err = labkit.StartQEMU(ctx, cfg)
	if err != nil {
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("xenlab: %w", err)
	}

	fail := func(err error) (*VM, error) {
		vm.Kill()
		return nil, err
	}
	deadline := time.Now().Add(opts.BootTimeout)
	_, _, err = vm.QEMU.WaitLine(ctx, 0, time.Until(deadline), func(l string) bool { return strings.HasPrefix(l, "XLAB DOM0 BOOTED") }, true)
	if err != nil {
		return fail(fmt.Errorf("xenlab: boot to dom0 init: %w", err))
	}
	vm.timings.Dom0Booted = time.Since(vm.QEMU.Started())
	_, idx, err := vm.QEMU.WaitLine(ctx, 0, time.Until(deadline), func(l string) bool { return strings.HasPrefix(l, "XLAB READY dom0") }, true)
	if err != nil {
		return fail(fmt.Errorf("xenlab: boot to dom0 command loop: %w", err))
	}
	vm.timings.Dom0Ready = time.Since(vm.QEMU.Started())
	vm.QEMU.SetWaitMark(idx + 1)
	var warns []string
	for _, l := range vm.QEMU.Lines(0, idx) {
		if strings.HasPrefix(l, "XLAB WARN") {
			warns = append(warns, l)
		}
	}
	if len(warns) > 0 {
		return fail(fmt.Errorf("xenlab: dom0 set-up failed:\n%s\n%s", strings.Join(warns, "\n"), vm.QEMU.LogTail(60)))
	}
	var names []string
	for i := 1; i <= opts.DomUs; i++ {
		names = append(names, fmt.Sprintf("domu%d", i))
	}
	if opts.DomUVCPUs > 1 {
		out, rc, err := vm.Run(fmt.Sprintf("sed -i 's/^vcpus .*/vcpus   = %d/' /etc/xen/domU.cfg.in && grep '^vcpus ' /etc/xen/domU.cfg.in", opts.DomUVCPUs), time.Minute)
		if err != nil || rc != 0 {
			return fail(fmt.Errorf("xenlab: domU vCPUs: rc %d %v: %s", rc, err, out))
		}
	}
	if len(names) > 0 {
		if err := vm.createDomUs(names, opts.DomUMemory); err != nil {
			return fail(err)
		}
	}
	vm.timings.DomUsCreated = time.Since(vm.QEMU.Started())
	for _, name := range names {
		if err := vm.waitDomU(name, opts.DomUTimeout); err != nil {
			return fail(err)
		}
	}
	vm.timings.DomUsReady = time.Since(vm.QEMU.Started())
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

// bootMilestones are the steps of a boot, which a boot that fails names.
var bootMilestones = []labkit.Milestone{
	{Name: "Xen started", Re: regexp.MustCompile(`^\(XEN\) Xen version`)},
	{Name: "Xen handed over to dom0", Re: regexp.MustCompile(`^\(XEN\) Freed \d+kB init memory`)},
	{Name: "dom0's kernel started", Re: regexp.MustCompile(`Linux version `)},
	{Name: "dom0's init ran", Re: regexp.MustCompile(`^XLAB DOM0 BOOTED`)},
	{Name: "the toolstack came up", Re: regexp.MustCompile(`^XLAB TOOLSTACK UP`)},
	{Name: "dom0's command loop", Re: regexp.MustCompile(`^XLAB READY dom0`)},
}

var panicRe = regexp.MustCompile(`Kernel panic - not syncing|\(XEN\) Panic on CPU|\(XEN\) \*\*\*\*\*\*\*\*\*\*\*\*`)

// Dir is the artifacts folder the VM booted from.
func (vm *VM) Dir() string { return vm.dir }

// XenCmdline and Dom0Cmdline are the command lines of this boot.
func (vm *VM) XenCmdline() string  { return vm.xenArgs }
func (vm *VM) Dom0Cmdline() string { return vm.d0Args }

// Timings are the boot's milestones.
func (vm *VM) Timings() Timings { return vm.timings }

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
	out, rc, err := vm.Run(fmt.Sprintf("xlab-domu create-many %d %s", memMiB, strings.Join(names, " ")), 5*time.Minute)
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
// waits for its command loop and returns its domid: the domid of the
// instance running then, which xl may have restarted while it booted.
func (vm *VM) CreateDomU(name string, memMiB int) (int, error) {
	if memMiB <= 0 {
		memMiB = vm.domuMem
	}
	if err := vm.createDomUs([]string{name}, memMiB); err != nil {
		return -1, err
	}
	if err := vm.waitDomU(name, vm.domuWait); err != nil {
		return vm.DomID(name), err
	}
	// the domU that came up may be a second instance: a domain that dies
	// while it boots (a triple fault of a PVH guest under QEMU 10.0's TCG,
	// seen once) is restarted by xl (on_reboot) with a new domid
	out, rc, err := vm.Run("xl domid "+name, 30*time.Second)
	if err != nil || rc != 0 {
		return vm.DomID(name), fmt.Errorf("xenlab: xl domid %s: rc %d %v: %s", name, rc, err, out)
	}
	id, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		return vm.DomID(name), fmt.Errorf("xenlab: xl domid %s: %q", name, out)
	}
	vm.mu.Lock()
	vm.domids[name] = id
	vm.mu.Unlock()
	return id, nil
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
		if _, err := vm.QEMU.Stdin().Write(b[:n]); err != nil {
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
	tag := fmt.Sprintf("h%d.%d", vm.seq, vm.QEMU.Started().UnixNano()%1000000)
	sum := md5.Sum([]byte(cmd))
	msg := "XLABCMD " + tag + " " + hex.EncodeToString(sum[:]) + " " + cmd
	prefix := "XLAB " + tag + " "
	deadline := time.Now().Add(timeout)

	from := vm.QEMU.NumLines()
	if err := vm.send(msg); err != nil {
		return "", -1, err
	}
	// the acknowledgement
	for attempt := 1; ; attempt++ {
		ackWait := min(time.Until(deadline), 20*time.Second)
		line, idx, err := vm.QEMU.WaitLine(context.Background(), from, ackWait, func(l string) bool {
			return strings.HasPrefix(l, prefix+"START") || strings.HasPrefix(l, prefix+"DUP") || strings.HasPrefix(l, prefix+"BAD")
		}, false)
		if err == nil && !strings.HasPrefix(line, prefix+"BAD") {
			break
		}
		if time.Until(deadline) <= 0 || attempt >= 5 || vm.QEMU.Exited() {
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
	line, idx, err := vm.QEMU.WaitLine(context.Background(), from, time.Until(deadline), rcRe.MatchString, false)
	if err != nil {
		return "", -1, fmt.Errorf("xenlab: run %q: %w", cmd, err)
	}
	m := rcRe.FindStringSubmatch(line)
	rc, _ := strconv.Atoi(m[1])
	want, _ := strconv.Atoi(m[2])
	out, n := collect(vm.QEMU.Lines(from, idx), prefix+"O")
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

// WaitFor waits for a serial line matching re and returns it. It looks at
// every line after the previous WaitFor match (after dom0's "XLAB READY" at
// first), skipping the framing of Run.
func (vm *VM) WaitFor(re *regexp.Regexp, timeout time.Duration) (string, error) {
	line, err := vm.QEMU.WaitFor(re, timeout, func(l string) bool { return strings.HasPrefix(l, "XLAB ") })
	if err != nil {
		return "", fmt.Errorf("xenlab: %w", err)
	}
	return line, nil
}

// PowerOff powers dom0 off (busybox poweroff -f; Xen then powers the machine
// off) and waits for QEMU to exit. On timeout it kills QEMU.
func (vm *VM) PowerOff(timeout time.Duration) error {
	err := vm.QEMU.PowerOff(func() error {
		vm.runMu.Lock()
		defer vm.runMu.Unlock()
		vm.seq++
		return vm.send(fmt.Sprintf("XLABCMD p%d - poweroff -f", vm.seq))
	}, timeout)
	if err != nil {
		return fmt.Errorf("xenlab: %w", err)
	}
	return nil
}
