//go:build linux && amd64

package coredump

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gprobes/gprobes/internal/testkit"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/sim"
)

// waitTickAbove waits for a "tick N" line with N > n: the program runs.
func (tg *target) waitTickAbove(t *testing.T, n int64) int64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if k := tg.tick(t); k > n {
			return k
		}
	}
	t.Fatalf("the program printed no tick above %d: it does not run", n)
	return 0
}

func gdbBatch(t *testing.T, program, core string, cmds ...string) string {
	t.Helper()
	args := []string{"-nx", "-batch"}
	for _, c := range cmds {
		args = append(args, "-ex", c)
	}
	args = append(args, program, core)
	out, err := exec.Command("gdb", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("gdb: %v\n%s", err, out)
	}
	return string(out)
}

func loads(t *testing.T, path string) []*elf.Prog {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	var out []*elf.Prog
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			out = append(out, p)
		}
	}
	return out
}

func progAt(t *testing.T, progs []*elf.Prog, addr uint64) *elf.Prog {
	t.Helper()
	for _, p := range progs {
		if p.Vaddr <= addr && addr < p.Vaddr+p.Memsz {
			return p
		}
	}
	t.Fatalf("no PT_LOAD holds %#x", addr)
	return nil
}

// TestDumpRunningProcess is the whole story: stop a running 3-thread
// program, dump it, let it go on, and check the core with gdb, readelf,
// debug/elf and our own reader.
func TestDumpRunningProcess(t *testing.T) {
	testkit.Need(t, "gcc", "gdb", "readelf")
	tg := startTarget(t)
	tg.tick(t)
	ids, _ := taskIDs(tg.pid)
	worker := 0
	for _, id := range ids {
		if id != tg.pid && (worker == 0 || id < worker) {
			worker = id // the first worker (id 1): it "hit the probe"
		}
	}
	p := tg.stop(t, worker)
	p.Threads[0].Signal = int(syscall.SIGTRAP)
	if len(p.Threads) != 3 || p.Threads[0].TID != worker {
		t.Fatalf("gathered %d threads, first %d", len(p.Threads), p.Threads[0].TID)
	}
	dir := t.TempDir()
	if d := os.Getenv("COREDUMP_KEEP"); d != "" {
		dir = d
	}
	t0 := time.Now()
	path, st, err := WriteFile(dir, "core.test", p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("WriteFile took %v in all (fsync and rename included)", time.Since(t0))
	t.Logf("dump of pid %d: %d bytes (%d of memory, %d segments, %d threads) in %v",
		tg.pid, st.Size, st.MemoryBytes, st.Segments, st.Threads, st.Duration)
	for _, r := range st.Omitted {
		t.Logf("omitted: %v", r)
	}
	for _, r := range st.ZeroFilled {
		t.Logf("zero-filled: %v", r)
	}

	// Written to a regular file, pages of zeros are holes; written to
	// anything else they are bytes. Both streams are the same core.
	var streamed bytes.Buffer
	st2, err := Write(&streamed, p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	onDisk, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(onDisk, streamed.Bytes()) {
		t.Errorf("the core file differs from the same core written to a buffer")
	}
	var sys syscall.Stat_t
	if err := syscall.Stat(path, &sys); err != nil {
		t.Fatal(err)
	}
	stD, err := Write(io.Discard, p, Options{})
	if err != nil || stD.Size != st.Size {
		t.Fatalf("Write to io.Discard: %v, %d bytes", err, stD.Size)
	}
	t.Logf("written to io.Discard in %v", stD.Duration)
	t.Logf("written to a buffer in %v; on disk %d bytes allocated for %d (holes)", st2.Duration, sys.Blocks*512, st.Size)

	// The dump is what memory held while the process was stopped: compare
	// every dumped byte with /proc/PID/mem before letting it go.
	progs := loads(t, path)
	checkAgainstMemory(t, path, progs, p.Mem, st)
	tickInCore := readU64(t, path, progs, tg.addr["ticks"])

	// The process runs on after the dump.
	tg.resume(t)
	after := tg.waitTickAbove(t, int64(tickInCore))
	t.Logf("ticks: %d in the core, %d after the dump", tickInCore, after)

	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != st.Size {
		t.Errorf("core file: %v, %v (want mode 0600, %d bytes)", fi, err, st.Size)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("dump directory holds %d entries, want only the core", len(ents))
	}
	if st.Threads != 3 || len(st.MissingTIDs) != 0 {
		t.Errorf("stats: %d threads, missing %v", st.Threads, st.MissingTIDs)
	}

	// Oracle 1: gdb.
	out := gdbBatch(t, tg.bin, path, "info threads", "thread apply all bt", "p global_string",
		"x/4gx heap_ptr", "thread apply all p/x $r12", "p/x $r13", "p ticks",
		"info proc mappings")
	t.Logf("gdb:\n%s", out)
	if n := len(regexp.MustCompile(`(?m)^[* ] +\d+ +(LWP|Thread) `).FindAllString(out, -1)); n != 3 {
		t.Errorf("gdb lists %d threads, want 3", n)
	}
	if !regexp.MustCompile(`(?m)^\* +1 +(LWP|Thread .*LWP) ` + strconv.Itoa(worker) + `\b`).MatchString(out) {
		t.Errorf("gdb's current thread is not %d (Threads[0])", worker)
	}
	for _, want := range []string{
		" in main (", " in worker (",
		fmt.Sprintf(`"gprobes core test, pid %d"`, tg.pid),
		"0x1122334400000000\t0x1122334400000001",
		"0x1122334400000002\t0x1122334400000003",
		"= 0x7e570001", "= 0x7e570002",
		fmt.Sprintf("= %#x", ^uint64(0x7e570001)),
		fmt.Sprintf("= %d\n", tickInCore),
		"Program terminated with signal SIGTRAP",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("gdb output lacks %q", want)
		}
	}
	// NT_FILE, as gdb reads it for "info proc mappings"
	page := uint64(os.Getpagesize())
	for _, re := range []string{
		`(?m)^ +0x[0-9a-f]+ +0x[0-9a-f]+ +0x[0-9a-f]+ +0x0 +` + regexp.QuoteMeta(tg.bin) + `$`,
		fmt.Sprintf(`(?m)^ +%#x +%#x +%#x +0x0 +/.*/data$`, tg.addr["short"], tg.addr["short"]+3*page, 3*page),
		`(?m)^ +0x[0-9a-f]+ +0x[0-9a-f]+ +0x[0-9a-f]+ +0x[0-9a-f]+ +/.*/libc\.so\.6$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("gdb's info proc mappings lacks %s", re)
		}
	}
	for _, bad := range []string{"Cannot access memory", "Couldn't find general-purpose registers", "Backtrace stopped"} {
		if strings.Contains(out, bad) {
			t.Errorf("gdb says %q", bad)
		}
	}

	// Oracle 2: readelf.
	re, err := exec.Command("readelf", "-W", "-n", "-l", path).CombinedOutput()
	if err != nil {
		t.Fatalf("readelf: %v\n%s", err, re)
	}
	ro := string(re)
	if strings.Contains(ro, "Warning") || strings.Contains(ro, "Error") {
		t.Errorf("readelf complains:\n%s", ro)
	}
	for want, n := range map[string]int{
		"NT_PRSTATUS": 3, "NT_FPREGSET": 3, "NT_PRPSINFO": 1, "NT_AUXV": 1, "NT_FILE": 1, "NT_SIGINFO": 1,
		"Elf file type is CORE": 1, "\n  NOTE ": 1,
	} {
		if c := strings.Count(ro, want); c != n {
			t.Errorf("readelf shows %q %d times, want %d", want, c, n)
		}
	}
	if c := strings.Count(ro, "\n  LOAD "); c != st.Segments {
		t.Errorf("readelf shows %d LOAD segments, Stats says %d", c, st.Segments)
	}

	// Oracle 3: our reader.
	env := sim.NewEnv()
	if err := env.LoadCore(path); err != nil {
		t.Fatal(err)
	}
	regs := p.Threads[0].Regs
	for r, want := range map[rpn.Reg]uint64{rpn.RegRIP: regs.Rip, rpn.RegRSP: regs.Rsp, rpn.RegR12: 0x7e570001,
		rpn.RegR13: ^uint64(0x7e570001), rpn.RegFSBase: regs.Fs_base} {
		if got, _ := env.Reg(r, false); got != want {
			t.Errorf("sim register %d = %#x, want %#x", r, got, want)
		}
	}
	if pid, _ := env.Sys(rpn.SysPID); pid != uint64(tg.pid) {
		t.Errorf("sim pid %d, want %d", pid, tg.pid)
	}
	if tid, _ := env.Sys(rpn.SysTID); tid != uint64(worker) {
		t.Errorf("sim tid %d, want %d", tid, worker)
	}
	want := fmt.Sprintf("gprobes core test, pid %d\x00", tg.pid)
	got := make([]byte, len(want))
	if !env.ReadMem(tg.addr["string"], got) || string(got) != want {
		t.Errorf("sim reads %q at global_string, want %q", got, want)
	}

	// debug/elf: the layout and the notes, field by field.
	checkNotes(t, path, p, tg)
	checkSegments(t, path, tg.pid, st)
}

// checkAgainstMemory compares every dumped segment with the process's
// memory (still stopped), pages reported zero-filled excepted.
func checkAgainstMemory(t *testing.T, path string, progs []*elf.Prog, mem io.ReaderAt, st Stats) {
	t.Helper()
	var compared int64
	for _, pr := range progs {
		if pr.Filesz == 0 {
			continue
		}
		core := make([]byte, pr.Filesz)
		if _, err := io.ReadFull(pr.Open(), core); err != nil {
			t.Fatal(err)
		}
		live := make([]byte, pr.Filesz)
		n, _ := mem.ReadAt(live, int64(pr.Vaddr))
		for _, z := range st.ZeroFilled {
			if z.Start >= pr.Vaddr && z.End <= pr.Vaddr+pr.Filesz {
				if !bytes.Equal(core[z.Start-pr.Vaddr:z.End-pr.Vaddr], make([]byte, z.End-z.Start)) {
					t.Errorf("zero-filled %v holds data", z)
				}
				n = int(z.Start - pr.Vaddr) // compare only what was readable before it
			}
		}
		if !bytes.Equal(core[:n], live[:n]) {
			t.Errorf("segment %#x: the core differs from memory", pr.Vaddr)
		}
		compared += int64(n)
	}
	t.Logf("%d bytes of the core match the process's memory", compared)
}

func readU64(t *testing.T, path string, progs []*elf.Prog, addr uint64) uint64 {
	t.Helper()
	pr := progAt(t, progs, addr)
	var b [8]byte
	if _, err := pr.ReadAt(b[:], int64(addr-pr.Vaddr)); err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint64(b[:])
}

// checkNotes decodes the notes: order, thread ids, registers, prpsinfo.
func checkNotes(t *testing.T, path string, p *Process, tg *target) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Type != elf.ET_CORE || f.Machine != elf.EM_X86_64 || f.Class != elf.ELFCLASS64 {
		t.Fatalf("ELF %v %v %v", f.Type, f.Machine, f.Class)
	}
	if f.Progs[0].Type != elf.PT_NOTE {
		t.Fatalf("first program header is %v", f.Progs[0].Type)
	}
	data := make([]byte, f.Progs[0].Filesz)
	if _, err := io.ReadFull(f.Progs[0].Open(), data); err != nil {
		t.Fatal(err)
	}
	var order []string
	thread := -1
	for len(data) >= 12 {
		namesz, descsz, typ := le.Uint32(data), le.Uint32(data[4:]), le.Uint32(data[8:])
		name := string(data[12 : 12+namesz-1])
		off := 12 + int(alignUp(uint64(namesz), 4))
		desc := data[off : off+int(descsz)]
		data = data[off+int(alignUp(uint64(descsz), 4)):]
		if name != "CORE" {
			t.Errorf("note name %q", name)
		}
		switch typ {
		case ntPRSTATUS:
			thread++
			order = append(order, "PRSTATUS")
			th := p.Threads[thread]
			if pid := int(le.Uint32(desc[32:])); pid != th.TID {
				t.Errorf("NT_PRSTATUS %d: pid %d, want %d", thread, pid, th.TID)
			}
			if !bytes.Equal(desc[112:112+regsSize], regsBytes(&th.Regs)) {
				t.Errorf("NT_PRSTATUS %d: registers differ", thread)
			}
			if ppid := int(le.Uint32(desc[36:])); ppid != os.Getpid() {
				t.Errorf("NT_PRSTATUS %d: ppid %d, want %d", thread, ppid, os.Getpid())
			}
			if sig := le.Uint16(desc[12:]); int(sig) != p.Threads[0].Signal {
				t.Errorf("NT_PRSTATUS %d: cursig %d, want %d", thread, sig, p.Threads[0].Signal)
			}
		case ntPRPSINFO:
			order = append(order, "PRPSINFO")
			if len(desc) != prpsinfoSize {
				t.Errorf("NT_PRPSINFO of %d bytes", len(desc))
			}
			if pid := int(le.Uint32(desc[24:])); pid != tg.pid {
				t.Errorf("NT_PRPSINFO pid %d, want %d", pid, tg.pid)
			}
			if desc[1] != 'T' || desc[0] != 3 {
				t.Errorf("NT_PRPSINFO state %d %q, want 3 'T' (stopped)", desc[0], desc[1])
			}
			if uid := le.Uint32(desc[16:]); int(uid) != os.Getuid() {
				t.Errorf("NT_PRPSINFO uid %d", uid)
			}
			if fname := string(bytes.TrimRight(desc[40:56], "\x00")); fname != "target" {
				t.Errorf("NT_PRPSINFO fname %q", fname)
			}
			args := string(bytes.TrimRight(desc[56:136], "\x00"))
			if !strings.HasPrefix(args, tg.bin+" ") || !strings.HasSuffix(args, "data") && len(args) < 79 {
				t.Errorf("NT_PRPSINFO psargs %q", args)
			}
		case ntFPREGSET:
			order = append(order, "FPREGSET")
			if !bytes.Equal(desc, p.Threads[thread].FPRegs) {
				t.Errorf("NT_FPREGSET of thread %d differs", thread)
			}
		case ntSIGINFO:
			order = append(order, "SIGINFO")
			if le.Uint32(desc) != uint32(syscall.SIGTRAP) || len(desc) != siginfoSize {
				t.Errorf("NT_SIGINFO signo %d, %d bytes", le.Uint32(desc), len(desc))
			}
		case ntAUXV:
			order = append(order, "AUXV")
			auxv, _ := os.ReadFile(fmt.Sprintf("/proc/%d/auxv", tg.pid))
			if !bytes.Equal(desc, auxv) {
				t.Errorf("NT_AUXV differs from /proc/PID/auxv")
			}
		case ntFILE:
			order = append(order, "FILE")
			count := le.Uint64(desc)
			names := strings.Split(strings.TrimSuffix(string(desc[16+24*count:]), "\x00"), "\x00")
			if uint64(len(names)) != count || le.Uint64(desc[8:]) != uint64(os.Getpagesize()) {
				t.Errorf("NT_FILE: %d entries, %d names", count, len(names))
			}
			if names[0] != tg.bin {
				t.Errorf("NT_FILE: first file %q, want the executable %s", names[0], tg.bin)
			}
		default:
			t.Errorf("unexpected note type %#x", typ)
		}
	}
	want := "PRSTATUS PRPSINFO SIGINFO AUXV FILE FPREGSET PRSTATUS FPREGSET PRSTATUS FPREGSET"
	if got := strings.Join(order, " "); got != want {
		t.Errorf("notes:\n got %s\nwant %s", got, want)
	}
}

// checkSegments checks one PT_LOAD per mapping with its permissions, the
// page alignment, and what was left out.
func checkSegments(t *testing.T, path string, pid int, st Stats) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	maps, err := readMaps(fmt.Sprintf("/proc/%d", pid))
	if err != nil {
		t.Fatal(err)
	}
	progs := f.Progs[1:]
	if len(progs) != len(maps) {
		t.Fatalf("%d PT_LOAD, %d mappings", len(progs), len(maps))
	}
	page := uint64(os.Getpagesize())
	omitted := map[uint64]string{}
	for _, r := range st.Omitted {
		omitted[r.Start] = r.Reason
	}
	sawVvar, sawGuard := false, false
	for i, pr := range progs {
		m := maps[i]
		if pr.Type != elf.PT_LOAD || pr.Vaddr != m.start || pr.Memsz != m.end-m.start || pr.Off%page != 0 {
			t.Errorf("PT_LOAD %d: %v %#x+%#x off %#x for %#x-%#x", i, pr.Type, pr.Vaddr, pr.Memsz, pr.Off, m.start, m.end)
		}
		var flags elf.ProgFlag
		if m.readable() {
			flags |= elf.PF_R
		}
		if m.writable() {
			flags |= elf.PF_W
		}
		if m.exec() {
			flags |= elf.PF_X
		}
		if pr.Flags != flags {
			t.Errorf("PT_LOAD %#x: flags %v for %s", pr.Vaddr, pr.Flags, m.perms)
		}
		reason, isOmitted := omitted[m.start]
		if isOmitted != (pr.Filesz == 0) || !isOmitted && pr.Filesz != pr.Memsz {
			t.Errorf("PT_LOAD %#x (%s %s): filesz %#x of %#x, omitted %q", pr.Vaddr, m.perms, m.path, pr.Filesz, pr.Memsz, reason)
		}
		if strings.HasPrefix(m.path, "[vvar") {
			sawVvar = true
			if pr.Filesz != 0 {
				t.Errorf("%s dumped", m.path)
			}
		}
		if m.perms == "---p" {
			sawGuard = true
		}
	}
	if !sawVvar || !sawGuard {
		t.Errorf("no [vvar] (%v) or guard mapping (%v) seen: the test no longer covers them", sawVvar, sawGuard)
	}
}

// TestUnreadableRegions: a mapping Mem refuses to read is written with
// p_filesz 0 and reported; a file mapping longer than its file keeps its
// first page and gets zeros, reported, for the rest; guard pages are
// omitted; none of this is an error.
func TestUnreadableRegions(t *testing.T) {
	testkit.Need(t, "gcc")
	tg := startTarget(t)
	p := tg.stop(t, 0)
	page := uint64(os.Getpagesize())
	secret := tg.addr["secret"]
	p.Mem = refusing{p.Mem, secret, secret + 2*page}
	path, st, err := WriteFile(t.TempDir(), "core", p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	tg.resume(t)
	progs := loads(t, path)
	reasons := map[uint64]string{}
	for _, r := range st.Omitted {
		reasons[r.Start] = r.Reason
	}
	if pr := progAt(t, progs, secret); pr.Filesz != 0 || !strings.Contains(reasons[secret], "unreadable: refused") {
		t.Errorf("refused mapping: filesz %#x, reason %q", pr.Filesz, reasons[secret])
	}
	if pr := progAt(t, progs, tg.addr["guard"]); pr.Filesz != 0 || reasons[tg.addr["guard"]] != "no read permission" {
		t.Errorf("guard mapping: filesz %#x, reason %q", pr.Filesz, reasons[tg.addr["guard"]])
	}
	short := tg.addr["short"]
	pr := progAt(t, progs, short)
	if pr.Filesz != 3*page {
		t.Fatalf("short file mapping: filesz %#x, want %#x", pr.Filesz, 3*page)
	}
	data := make([]byte, pr.Filesz)
	if _, err := io.ReadFull(pr.Open(), data); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data[:page], bytes.Repeat([]byte("F"), int(page))) || !bytes.Equal(data[page:], make([]byte, 2*page)) {
		t.Errorf("short file mapping: not one page of F then zeros")
	}
	found := false
	for _, z := range st.ZeroFilled {
		if z.Start == short+page && z.End == short+3*page {
			found = true
		}
	}
	if !found {
		t.Errorf("the unreadable end of the short mapping is not reported: %v", st.ZeroFilled)
	}
	env := sim.NewEnv()
	if err := env.LoadCore(path); err != nil {
		t.Fatal(err)
	}
	if env.ReadMem(secret, make([]byte, 1)) {
		t.Errorf("sim reads the omitted mapping")
	}
}

// refusing is a Mem that fails reads of [lo, hi), as /proc/PID/mem does
// for device memory.
type refusing struct {
	io.ReaderAt
	lo, hi uint64
}

func (r refusing) ReadAt(b []byte, off int64) (int, error) {
	a := uint64(off)
	if a < r.hi && a+uint64(len(b)) > r.lo {
		if a >= r.lo {
			return 0, errors.New("refused")
		}
		n, err := r.ReaderAt.ReadAt(b[:r.lo-a], off)
		if err == nil {
			err = errors.New("refused")
		}
		return n, err
	}
	return r.ReaderAt.ReadAt(b, off)
}

// TestMaxBytes: a dump over the limit is refused before anything is
// written, and WriteFile leaves nothing behind.
func TestMaxBytes(t *testing.T) {
	testkit.Need(t, "gcc")
	tg := startTarget(t)
	p := tg.stop(t, 0)
	var buf bytes.Buffer
	st, err := Write(&buf, p, Options{MaxBytes: 1 << 20})
	if err == nil || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("Write with MaxBytes 1 MiB: %v", err)
	}
	if buf.Len() != 0 {
		t.Errorf("%d bytes written before the refusal", buf.Len())
	}
	if st.Size <= 1<<20 {
		t.Errorf("refused a dump of %d bytes", st.Size)
	}
	dir := t.TempDir()
	if _, _, err := WriteFile(dir, "core", p, Options{MaxBytes: 1 << 20}); err == nil {
		t.Fatal("WriteFile over the limit succeeded")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("WriteFile left %v", ents)
	}
	// exactly the size is allowed
	if _, err := Write(io.Discard, p, Options{MaxBytes: st.Size}); err != nil {
		t.Errorf("MaxBytes equal to the size: %v", err)
	}
	tg.resume(t)
	tg.waitTickAbove(t, 0)
}

// TestSkipFileBackedReadOnly: read-only file mappings are left out but for
// their ELF header page, and gdb still unwinds (it reads text from the
// files NT_FILE names).
func TestSkipFileBackedReadOnly(t *testing.T) {
	testkit.Need(t, "gcc", "gdb")
	tg := startTarget(t)
	p := tg.stop(t, 0)
	full, err := Write(io.Discard, p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	path, st, err := WriteFile(t.TempDir(), "core", p, Options{SkipFileBackedReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	tg.resume(t)
	t.Logf("full dump %d bytes, without read-only file mappings %d bytes", full.Size, st.Size)
	if st.Size >= full.Size {
		t.Errorf("filtered dump is not smaller")
	}
	maps, err := readMaps(fmt.Sprintf("/proc/%d", tg.pid))
	if err != nil {
		t.Fatal(err)
	}
	progs := loads(t, path)
	page := uint64(os.Getpagesize())
	headers := 0
	for i, m := range maps {
		pr := progs[i]
		switch {
		case m.readable() && !m.writable() && m.rereadable():
			if m.offset == 0 && pr.Filesz == page {
				headers++
			} else if pr.Filesz != 0 {
				t.Errorf("%s %s at %#x: filesz %#x", m.perms, m.path, m.start, pr.Filesz)
			}
		case m.writable() && m.readable():
			if pr.Filesz != pr.Memsz {
				t.Errorf("writable %s %s at %#x not dumped", m.perms, m.path, m.start)
			}
		}
	}
	if headers < 2 { // the executable, libc, ld.so
		t.Errorf("%d ELF header pages kept", headers)
	}
	out := gdbBatch(t, tg.bin, path, "thread apply all bt", "p global_string")
	if !strings.Contains(out, " in main (") || !strings.Contains(out, " in worker (") ||
		!strings.Contains(out, fmt.Sprintf("pid %d", tg.pid)) {
		t.Errorf("gdb on the filtered core:\n%s", out)
	}
}

// TestProcessExits: a process that dies before or during the dump gives
// an error (ErrGone when the memory vanishes), never a panic, and
// WriteFile leaves no file behind.
func TestProcessExits(t *testing.T) {
	testkit.Need(t, "gcc")
	t.Run("before", func(t *testing.T) {
		tg := startTarget(t)
		p := tg.stop(t, 0)
		tg.kill(t)
		dir := t.TempDir()
		_, _, err := WriteFile(dir, "core", p, Options{})
		if !errors.Is(err, ErrGone) {
			t.Fatalf("got %v, want ErrGone", err)
		}
		t.Logf("error: %v", err)
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("WriteFile left %v", ents)
		}
	})
	for _, when := range []string{"planning", "copying"} {
		t.Run("while "+when, func(t *testing.T) {
			tg := startTarget(t)
			p := tg.stop(t, 0)
			p.Mem = &killing{ReaderAt: p.Mem, t: t, tg: tg, minLen: map[string]int{"planning": 1, "copying": 5}[when]}
			dir := t.TempDir()
			_, _, err := WriteFile(dir, "core", p, Options{})
			if !errors.Is(err, ErrGone) {
				t.Fatalf("got %v, want ErrGone", err)
			}
			t.Logf("error: %v", err)
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Errorf("WriteFile left %v", ents)
			}
		})
	}
}

// killing kills the process at the first read of at least minLen bytes
// and waits until its memory is gone, then reads on.
type killing struct {
	io.ReaderAt
	t      *testing.T
	tg     *target
	minLen int
	done   bool
}

func (k *killing) ReadAt(b []byte, off int64) (int, error) {
	if !k.done && len(b) >= k.minLen {
		k.done = true
		syscall.Kill(k.tg.pid, syscall.SIGKILL)
		deadline := time.Now().Add(5 * time.Second)
		for {
			n, err := k.ReaderAt.ReadAt(b[:1], off)
			if n == 0 && err == io.EOF {
				break
			}
			if time.Now().After(deadline) {
				k.t.Errorf("memory still readable 5 s after SIGKILL")
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	return k.ReaderAt.ReadAt(b, off)
}

// TestWriteErrors: bad arguments and a failing writer are errors.
func TestWriteErrors(t *testing.T) {
	if _, err := Write(io.Discard, nil, Options{}); err == nil {
		t.Error("nil process")
	}
	if _, err := Write(io.Discard, &Process{PID: os.Getpid(), Mem: bytes.NewReader(nil)}, Options{}); err == nil {
		t.Error("no threads")
	}
	if _, err := Write(io.Discard, &Process{PID: os.Getpid(), Threads: []Thread{{TID: 1 << 30}}, Mem: bytes.NewReader(nil)}, Options{}); err == nil {
		t.Error("a thread that is not the process's")
	}
	if _, _, err := WriteFile(t.TempDir(), "a/b", &Process{}, Options{}); err == nil {
		t.Error("a path as the name")
	}
}

// TestFailingWriter: a writer error stops the dump and is returned.
func TestFailingWriter(t *testing.T) {
	testkit.Need(t, "gcc")
	tg := startTarget(t)
	p := tg.stop(t, 0)
	_, err := Write(&failAfter{n: 100 << 10}, p, Options{})
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("got %v", err)
	}
	tg.resume(t)
}

type failAfter struct{ n int }

func (f *failAfter) Write(b []byte) (int, error) {
	if len(b) > f.n {
		n := f.n
		f.n = 0
		return n, errors.New("disk full")
	}
	f.n -= len(b)
	return len(b), nil
}

func TestParseMapsLine(t *testing.T) {
	for _, tc := range []struct {
		line string
		ok   bool
		want mapping
	}{
		{"7f00-7f10 r-xp 00002000 fe:00 123   /usr/lib/a b.so (deleted)", true,
			mapping{start: 0x7f00, end: 0x7f10, perms: "r-xp", offset: 0x2000, path: "/usr/lib/a b.so (deleted)"}},
		{"ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]", true,
			mapping{start: 0xffffffffff600000, end: 0xffffffffff601000, perms: "--xp", path: "[vsyscall]"}},
		{"7f00-7f10 rw-p 00000000 00:00 0", true, mapping{start: 0x7f00, end: 0x7f10, perms: "rw-p"}},
		{"Rss:                   4 kB", false, mapping{}},
	} {
		m, ok, err := parseMapsLine(tc.line)
		if err != nil || ok != tc.ok || fmt.Sprint(m) != fmt.Sprint(tc.want) && ok {
			t.Errorf("%q: %+v %v %v", tc.line, m, ok, err)
		}
	}
	if _, _, err := parseMapsLine("7f10-7f00 r-xp 0 0 0"); err == nil {
		t.Error("end before start accepted")
	}
}

// TestExtendedNumbering: more than 65534 segments use PN_XNUM, as the
// kernel does; readelf must read the real count.
func TestExtendedNumbering(t *testing.T) {
	testkit.Need(t, "readelf")
	const n = 70000
	maps := make([]mapping, n)
	for i := range maps {
		maps[i] = mapping{start: uint64(0x10000 + i*0x2000), end: uint64(0x11000 + i*0x2000), perms: "---p"}
	}
	var st Stats
	segs, err := plan(maps, bytes.NewReader(nil), Options{}, 4096, &st)
	if err != nil {
		t.Fatal(err)
	}
	var notes noteBuf
	notes.add("CORE", ntPRSTATUS, make([]byte, prstatusSize))
	phnum := 1 + len(segs)
	headers := uint64(ehdrSize + phdrSize*phnum + shdrSize)
	off := alignUp(headers+uint64(len(notes.b)), 4096)
	for i := range segs {
		segs[i].offset = off
	}
	path := filepath.Join(t.TempDir(), "core")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := newOut(f)
	if err := emit(w, bytes.NewReader(nil), notes.b, segs, phnum, headers, &st); err != nil {
		t.Fatal(err)
	}
	if err := w.finish(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	out, err := exec.Command("readelf", "-W", "-l", path).CombinedOutput()
	if err != nil {
		t.Fatalf("readelf: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), fmt.Sprintf("There are %d program headers", n+1)) {
		t.Errorf("readelf:\n%.600s", out)
	}
	if c := strings.Count(string(out), "\n  LOAD "); c != n {
		t.Errorf("readelf shows %d LOAD segments, want %d", c, n)
	}
	// gprobes sim --core reads it too (the count from section header 0)
	if err := sim.NewEnv().LoadCore(path); err != nil {
		t.Errorf("sim: %v", err)
	}
}

// WriteFile never replaces or follows what stands at the core's name: a
// FIFO or a link planted in a shared dump folder makes the dump fail, and
// the FIFO stays, the link's target is not written. A rename over them
// used to replace them with the core and report success.
func TestWriteFileReplacesNothing(t *testing.T) {
	testkit.Need(t, "gcc")
	tg := startTarget(t)
	p := tg.stop(t, 0)
	dir := t.TempDir()
	fifo := filepath.Join(dir, "core.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	elsewhere := filepath.Join(t.TempDir(), "elsewhere")
	os.Symlink(elsewhere, filepath.Join(dir, "core.link"))
	for _, name := range []string{"core.fifo", "core.link"} {
		if _, _, err := WriteFile(dir, name, p, Options{}); !errors.Is(err, os.ErrExist) {
			t.Errorf("%s: %v, want an error saying it exists", name, err)
		}
	}
	if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the FIFO is now %v (%v)", fi.Mode(), err)
	}
	if _, err := os.Lstat(elsewhere); err == nil {
		t.Error("the link's target was written")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Errorf("the folder holds %d entries, want the FIFO and the link", len(ents))
	}
	// and a new name is written as before
	if _, _, err := WriteFile(dir, "core.new", p, Options{}); err != nil {
		t.Fatal(err)
	}
}
