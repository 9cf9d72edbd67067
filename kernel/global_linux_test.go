//go:build linux

package kernel

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gprobes/gprobes/internal/testkit"
	"github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/ptrace"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/symbols"
)

// buildLib builds testdata/globlib.c as dir/libglob.so: into a file of
// its own, renamed over the path (a new inode, as a linker's output is),
// with -DVARIANT another build whose glob_fn is at another offset.
func buildLib(t testing.TB, dir string, variant bool) string {
	t.Helper()
	testkit.Need(t, "gcc")
	tmp := filepath.Join(dir, ".libglob.so.new")
	args := []string{"-shared", "-fPIC", "-O1", "-Wl,-soname,libglob.so", "-o", tmp, "testdata/globlib.c"}
	if variant {
		args = append(args, "-DVARIANT")
	}
	if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %v: %v\n%s", args, err, out)
	}
	lib := filepath.Join(dir, "libglob.so")
	if err := os.Rename(tmp, lib); err != nil {
		t.Fatal(err)
	}
	return lib
}

// buildUser builds testdata/globuser.c against dir's libglob.so.
func buildUser(t testing.TB, dir, lib string) string {
	t.Helper()
	exe := filepath.Join(dir, "globuser")
	args := []string{"-O1", "-o", exe, "testdata/globuser.c", lib, "-Wl,-rpath," + dir}
	if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %v: %v\n%s", args, err, out)
	}
	return exe
}

// user is a globuser process that calls glob_fn when told.
type user struct {
	t   *testing.T
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func startUser(t *testing.T, exe string) *user {
	t.Helper()
	cmd := exec.Command(exe)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outp, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	u := &user{t: t, cmd: cmd, in: in, out: bufio.NewReader(outp)}
	t.Cleanup(func() { in.Close(); cmd.Process.Kill(); cmd.Wait() })
	if l, err := u.out.ReadString('\n'); err != nil || l != "ready\n" {
		t.Fatalf("globuser: %q %v", l, err)
	}
	return u
}

func (u *user) pid() int { return u.cmd.Process.Pid }

// call makes the process call glob_fn n times and checks its answer
// (the sum of 2i+1: n²).
func (u *user) call(n int) {
	u.t.Helper()
	fmt.Fprintf(u.in, "%d\n", n)
	l, err := u.out.ReadString('\n')
	if err != nil || l != fmt.Sprintf("done %d\n", n*n) {
		u.t.Fatalf("globuser %d after %d calls: %q %v, want done %d", u.pid(), n, l, err, n*n)
	}
}

// runUser runs a short-lived globuser of n calls and returns its pid.
func runUser(t *testing.T, exe string, n int) int {
	t.Helper()
	cmd := exec.Command(exe, strconv.Itoa(n))
	out, err := cmd.Output()
	if err != nil || string(out) != fmt.Sprintf("done %d\n", n*n) {
		t.Fatalf("%s %d: %q %v", exe, n, out, err)
	}
	return cmd.Process.Pid
}

// fnOffset is glob_fn's offset in the library file and the byte there.
func fnOffset(t *testing.T, lib string) (uint64, byte) {
	t.Helper()
	f, err := openUfile(lib)
	if err != nil {
		t.Fatal(err)
	}
	s, err := f.syms.Lookup("glob_fn")
	if err != nil {
		t.Fatal(err)
	}
	off, err := f.fileOffset(s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if err := f.read(s.Addr, b); err != nil {
		t.Fatal(err)
	}
	return off, b[0]
}

// textByte reads the byte a process has at a file offset of the library
// it maps: where a uprobe puts its int3.
func textByte(t *testing.T, pid int, lib string, off uint64) byte {
	t.Helper()
	maps, err := ptrace.Maps(pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range maps {
		if m.Path == lib && m.Exec() && off >= m.Offset && off < m.Offset+(m.End-m.Start) {
			f, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			b := make([]byte, 1)
			if _, err := f.ReadAt(b, int64(m.Start+off-m.Offset)); err != nil {
				t.Fatal(err)
			}
			return b[0]
		}
	}
	t.Fatalf("process %d maps no code of %s at offset %#x", pid, lib, off)
	return 0
}

// waitFor polls cond until it holds or 20 s pass, then fails with what
// was seen.
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	end := time.Now().Add(20 * time.Second)
	for {
		ok, seen := cond()
		if ok {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("after 20 s, still not %s: %s", what, seen)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

const globProbe = `name = %s
modtype = user
vars = 1
offset = glob_fn
inc lv,0
push r,rdi
log 1
exit 1
`

// TestHostGlobal: a probe on a shared library's function, placed once on
// the file, counts exactly the calls of every process that maps it: one
// running before the insert, one started after, five short-lived ones;
// each record carries its process's pid and command name and the
// argument of the call, in order. The int3 is in the running processes'
// text while the probe is in and gone after remove, which leaves no
// uprobe link in the kernel.
func TestHostGlobal(t *testing.T) {
	dir := t.TempDir()
	lib := buildLib(t, dir, false)
	exe := buildUser(t, dir, lib)
	k, r := start(t, Options{User: true})
	before := startUser(t, exe)
	off, orig := fnOffset(t, lib)
	if b := textByte(t, before.pid(), lib, off); b != orig || orig == 0xcc {
		t.Fatalf("process %d has %#02x at glob_fn before the insert, the file %#02x", before.pid(), b, orig)
	}
	infos, err := k.Insert(compile(t, fmt.Sprintf(globProbe, lib)), probe.InsertNew)
	if err != nil || len(infos) != 1 || infos[0].State != probe.StateActive || infos[0].How != "uprobe" {
		t.Fatalf("insert: %+v %v", infos, err)
	}
	if b := textByte(t, before.pid(), lib, off); b != 0xcc {
		t.Fatalf("process %d (running before the insert) has %#02x at glob_fn, not the uprobe's int3", before.pid(), b)
	}
	want := map[int]int{}
	before.call(100)
	want[before.pid()] = 100
	after := startUser(t, exe)
	after.call(200)
	want[after.pid()] = 200
	for i := 0; i < 5; i++ {
		want[runUser(t, exe, 30+i)] = 30 + i
	}
	total := 0
	for _, n := range want {
		total += n
	}
	waitFor(t, fmt.Sprintf("%d records", total), func() (bool, string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.all) >= total, fmt.Sprintf("%d records", len(r.all))
	})
	lv, _, err := k.Vars(lib, false)
	if err != nil || lv[0] != uint64(total) {
		t.Fatalf("lv %v %v, want %d", lv, err, total)
	}
	if q := k.Query(); len(q) != 1 || q[0].Hits != uint64(total) || q[0].Faults != 0 {
		t.Fatalf("query: %+v, want %d hits", q, total)
	}
	r.mu.Lock()
	got := map[int]int{}
	for _, rec := range r.all {
		i := got[rec.Pid]
		if len(rec.Data) != 8 || binary.LittleEndian.Uint64(rec.Data) != uint64(i) || rec.Comm != "globuser" || rec.Tid != rec.Pid {
			r.mu.Unlock()
			t.Fatalf("record %d of process %d: data %x comm %q tid %d; want rdi %d, comm globuser, its one thread", i, rec.Pid, rec.Data, rec.Comm, rec.Tid, i)
		}
		got[rec.Pid] = i + 1
	}
	extra := len(r.all) - total
	r.mu.Unlock()
	if extra != 0 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("records by pid %v, want %v (%d more)", got, want, extra)
	}
	if n, err := UprobeLinks(lib); n != 1 || err != nil {
		t.Fatalf("%d uprobe links on %s with the probe in (%v)", n, lib, err)
	}
	// query's hits by process: each process's calls, the running ones
	// named
	qp := k.QueryProcesses()
	byPid := map[int]int{}
	for _, ph := range qp[0].Processes {
		byPid[ph.Pid] = int(ph.Hits)
		running := ph.Pid == before.pid() || ph.Pid == after.pid()
		if running && ph.Comm != "globuser" || !running && ph.Comm != "" {
			t.Errorf("process %d: command %q", ph.Pid, ph.Comm)
		}
	}
	if fmt.Sprint(byPid) != fmt.Sprint(want) || qp[0].Processes[0].Pid != after.pid() {
		t.Fatalf("hits by process %+v, want %v, the most first", qp[0].Processes, want)
	}
	if n, err := k.Remove(lib, nil); n != 1 || err != nil {
		t.Fatalf("remove: %d %v", n, err)
	}
	for _, u := range []*user{before, after} {
		if b := textByte(t, u.pid(), lib, off); b != orig {
			t.Fatalf("process %d has %#02x at glob_fn after remove, the file %#02x", u.pid(), b, orig)
		}
		u.call(7)
	}
	if n, err := UprobeLinks(lib); n != 0 || err != nil {
		t.Fatalf("%d uprobe links on %s after remove (%v)", n, lib, err)
	}
	t.Logf("%d calls in %d processes, each counted and recorded with its pid", total, len(want))
}

// TestHostBuildID: a pack bound to a build goes only on a file of that
// build: another build is refused naming both IDs. A library rebuilt
// under the same path (a new file, glob_fn at another offset) is noticed:
// the probes of a pack bound to the old build come out of every process
// and are refused naming both IDs, never placed at the old offsets in
// the new file; a module bound to no build is placed again at the new
// file's glob_fn and counts exactly the calls of a process of the new
// build.
func TestHostBuildID(t *testing.T) {
	dir := t.TempDir()
	lib := buildLib(t, dir, false)
	exe := buildUser(t, dir, lib)
	tab, err := symbols.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	id := tab.BuildID()
	if len(id) == 0 {
		t.Fatalf("%s has no build ID (gcc without --build-id?)", lib)
	}
	kb, _ := start(t, Options{User: true, Poll: 20 * time.Millisecond})
	other := []byte("not the library's build")
	m := compile(t, fmt.Sprintf(globProbe, lib))
	m.BuildID = other
	infos, err := kb.Insert(m, probe.InsertNew)
	if err != nil || len(infos) != 1 || infos[0].State != probe.StateRefused ||
		!strings.Contains(infos[0].Reason, hex.EncodeToString(other)) || !strings.Contains(infos[0].Reason, hex.EncodeToString(id)) {
		t.Fatalf("insert of a pack for another build: %+v %v; want refused naming %x and %x", infos, err, other, id)
	}
	if n, err := UprobeLinks(lib); n != 0 || err != nil {
		t.Fatalf("%d uprobe links on %s after a refusal (%v)", n, lib, err)
	}
	if _, err := kb.Remove(lib, nil); err != nil {
		t.Fatal(err)
	}
	bound := compile(t, fmt.Sprintf(globProbe, lib))
	bound.BuildID = id
	if infos, err := kb.Insert(bound, probe.InsertNew); err != nil || infos[0].State != probe.StateActive {
		t.Fatalf("insert of the pack for the library's build: %+v %v", infos, err)
	}
	ku, _ := start(t, Options{User: true, Poll: 20 * time.Millisecond})
	if infos, err := ku.Insert(compile(t, fmt.Sprintf(globProbe, lib)), probe.InsertNew); err != nil || infos[0].State != probe.StateActive {
		t.Fatalf("insert of the unbound module: %+v %v", infos, err)
	}
	old := startUser(t, exe)
	old.call(10)
	oldOff, _ := fnOffset(t, lib)
	buildLib(t, dir, true)
	newOff, newOrig := fnOffset(t, lib)
	if newOff == oldOff {
		t.Fatalf("the rebuilt library has glob_fn at %#x as before: the test proves nothing", newOff)
	}
	tab2, err := symbols.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the bound pack refused for the new build", func() (bool, string) {
		q := kb.Query()
		return q[0].State == probe.StateRefused && strings.Contains(q[0].Reason, hex.EncodeToString(id)) &&
			strings.Contains(q[0].Reason, hex.EncodeToString(tab2.BuildID())), fmt.Sprintf("%+v", q)
	})
	newFn, err := symbols.NewSet(tab2).Lookup("glob_fn")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the unbound module placed on the new file", func() (bool, string) {
		q := ku.Query()
		return q[0].State == probe.StateActive && q[0].Address == newFn.Addr, fmt.Sprintf("%+v, glob_fn now %#x", q, newFn.Addr)
	})
	lvB0, _, _ := kb.Vars(lib, false)
	lvU0, _, _ := ku.Vars(lib, false)
	nu := startUser(t, exe)
	if b := textByte(t, nu.pid(), lib, newOff); b != 0xcc {
		t.Fatalf("a process of the new build has %#02x at its glob_fn, not the int3 (the file: %#02x)", b, newOrig)
	}
	nu.call(50)
	runUser(t, exe, 3)
	waitFor(t, "53 calls counted", func() (bool, string) {
		lv, _, _ := ku.Vars(lib, false)
		return lv[0]-lvU0[0] == 53, fmt.Sprint(lv[0] - lvU0[0])
	})
	if lv, _, _ := kb.Vars(lib, false); lv[0] != lvB0[0] {
		t.Fatalf("the pack bound to the old build counted %d calls of the new build", lv[0]-lvB0[0])
	}
	if lvB0[0] != 10 {
		t.Fatalf("the bound pack counted %d of the old build's 10 calls", lvB0[0])
	}
	t.Logf("glob_fn moved %#x -> %#x; the bound pack: %s", oldOff, newOff, kb.Query()[0].Reason)
}

// TestHostRetprobe: a retprobe on a shared library's function is a
// uretprobe in every process: each record carries the call's return
// value (rax), 2i+1 for the call glob_fn(i), in order, by process.
func TestHostRetprobe(t *testing.T) {
	dir := t.TempDir()
	lib := buildLib(t, dir, false)
	exe := buildUser(t, dir, lib)
	k, r := start(t, Options{User: true})
	infos, err := k.Insert(compile(t, fmt.Sprintf("name = %s\nmodtype = user\nretprobe = glob_fn\npush r,rax\nlog 1\nexit 1\n", lib)), probe.InsertNew)
	if err != nil || len(infos) != 1 || infos[0].State != probe.StateActive || infos[0].How != "uretprobe" {
		t.Fatalf("insert: %+v %v", infos, err)
	}
	want := map[int]int{}
	for i := 0; i < 3; i++ {
		want[runUser(t, exe, 40+i)] = 40 + i
	}
	waitFor(t, "123 records", func() (bool, string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.all) >= 123, fmt.Sprintf("%d records", len(r.all))
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	got := map[int]int{}
	for _, rec := range r.all {
		i := got[rec.Pid]
		if len(rec.Data) != 8 || binary.LittleEndian.Uint64(rec.Data) != uint64(2*i+1) {
			t.Fatalf("return %d of process %d: %x, want %d", i, rec.Pid, rec.Data, 2*i+1)
		}
		got[rec.Pid] = i + 1
	}
	if len(r.all) != 123 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("records by pid %v, want %v", got, want)
	}
}

// TestHostBoundary: a user probe is placed only on an instruction
// boundary of the file's code, decoded from the function's first byte
// (a uprobe in the middle of an instruction would corrupt every process
// running it), and opcode = is checked against the file's byte; the
// processes run as before, untouched.
func TestHostBoundary(t *testing.T) {
	dir := t.TempDir()
	lib := buildLib(t, dir, false)
	exe := buildUser(t, dir, lib)
	k, _ := start(t, Options{User: true})
	_, orig := fnOffset(t, lib)
	infos, err := k.Insert(compile(t, fmt.Sprintf(`name = %s
modtype = user
offset = glob_fn+1
minor = 1
exit 0
offset = glob_fn
minor = 2
opcode = 0x%02x
exit 0
offset = glob_fn
minor = 3
opcode = 0x90
exit 0
`, lib, orig)), probe.InsertNew)
	if err != nil || len(infos) != 3 {
		t.Fatalf("insert: %+v %v", infos, err)
	}
	if i := infos[0]; i.State != probe.StateRefused || !strings.Contains(i.Reason, "glob_fn+0x1 is not an instruction boundary: the instruction at +0x0 (LEA") {
		t.Errorf("glob_fn+1: %s %s", i.State, i.Reason)
	}
	if i := infos[1]; i.State != probe.StateActive {
		t.Errorf("glob_fn with its opcode: %s %s", i.State, i.Reason)
	}
	if i := infos[2]; i.State != probe.StateMismatch || !strings.Contains(i.Reason, fmt.Sprintf("is %#02x, not the opcode 0x90", orig)) {
		t.Errorf("glob_fn with opcode 0x90: %s %s", i.State, i.Reason)
	}
	if n, err := UprobeLinks(lib); n != 1 || err != nil {
		t.Errorf("%d uprobe links, want the one placed (%v)", n, err)
	}
	runUser(t, exe, 100)
}

// TestHostMountNamespace: a process in another mount namespace that
// reaches the probed library by another path (its folder bind-mounted
// elsewhere, the original path hidden under a tmpfs) runs the same inode,
// and its calls are counted exactly, its maps naming the other path.
func TestHostMountNamespace(t *testing.T) {
	testkit.Need(t, "unshare", "mount")
	dir := t.TempDir()
	lib := buildLib(t, dir, false)
	buildUser(t, dir, lib) // dir/globuser, run as other/globuser
	other := t.TempDir()
	k, r := start(t, Options{User: true})
	if infos, err := k.Insert(compile(t, fmt.Sprintf(globProbe, lib)), probe.InsertNew); err != nil || infos[0].State != probe.StateActive {
		t.Fatalf("insert: %+v %v", infos, err)
	}
	script := fmt.Sprintf(`mount --bind %[1]s %[2]s && mount -t tmpfs none %[1]s && test ! -e %[3]s && LD_LIBRARY_PATH=%[2]s %[2]s/globuser 37 && echo "lib $(LD_LIBRARY_PATH=%[2]s ldd %[2]s/globuser | grep libglob)"`,
		dir, other, lib)
	out, err := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", script).CombinedOutput()
	if err != nil {
		testkit.SkipOrFail(t, "unshare -m with a bind mount: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "done 1369\n") || !strings.Contains(string(out), "libglob.so => "+other+"/libglob.so") {
		t.Fatalf("the process in the other namespace:\n%s", out)
	}
	waitFor(t, "37 calls counted", func() (bool, string) {
		lv, _, _ := k.Vars(lib, false)
		return lv[0] == 37, fmt.Sprint(lv)
	})
	waitFor(t, "37 records", func() (bool, string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.all) == 37, fmt.Sprintf("%d records", len(r.all))
	})
	t.Logf("37 calls through %s/libglob.so in another mount namespace; the probe is on %s", other, lib)
}

// TestHostAddresses: push d of an address in a shared library, which is
// at another address in each process: one program moves it by each hit's
// load bias, so the probe reads glob_name in every process, and the
// address it pushed is the one in that process (its mapping of the
// library plus the link-time address). A return probe cannot know the
// bias and is refused, saying why.
func TestHostAddresses(t *testing.T) {
	dir := t.TempDir()
	lib := buildLib(t, dir, false)
	exe := buildUser(t, dir, lib)
	f, err := openUfile(lib)
	if err != nil {
		t.Fatal(err)
	}
	name, err := f.syms.Lookup("glob_name")
	if err != nil {
		t.Fatal(err)
	}
	k, r := start(t, Options{User: true})
	infos, err := k.Insert(compile(t, fmt.Sprintf(`name = %s
modtype = user
offset = glob_fn
push d,glob_name
log 1
push d,16
push d,glob_name
log str
exit 1
retprobe = glob_fn
push d,glob_name
log 1
exit 1
`, lib)), probe.InsertNew)
	if err != nil || len(infos) != 2 || infos[0].State != probe.StateActive {
		t.Fatalf("insert: %+v %v", infos, err)
	}
	if i := infos[1]; i.State != probe.StateRefused || !strings.Contains(i.Reason, "a return probe does not see where the process loaded it") {
		t.Errorf("the return probe: %s %s", i.State, i.Reason)
	}
	users := []*user{startUser(t, exe), startUser(t, exe)}
	want := map[int]uint64{}
	for _, u := range users {
		maps, err := ptrace.Maps(u.pid())
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range maps {
			if m.Path == lib && m.Offset == 0 {
				want[u.pid()] = m.Start + name.Addr // the library's first segment is at 0
				break
			}
		}
		u.call(2)
	}
	waitFor(t, "4 records", func() (bool, string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.all) >= 4, fmt.Sprintf("%d records", len(r.all))
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range r.all {
		if rec.Kind != probe.RecordLog || len(rec.Data) != 8+len("libglob") || string(rec.Data[8:]) != "libglob" ||
			binary.LittleEndian.Uint64(rec.Data) != want[rec.Pid] {
			t.Fatalf("record of process %d: %s %s %x, want glob_name at %#x and \"libglob\"", rec.Pid, rec.Kind, rec.Exception, rec.Data, want[rec.Pid])
		}
	}
	if len(r.all) != 4 {
		t.Fatalf("%d records, want 4", len(r.all))
	}
	t.Logf("glob_name at %#x (link time): %v in the processes", name.Addr, want)
}

// TestHostCountsAndExceptions: pass count and max hits count the hits of
// every process together (one probe on the file, not one per process);
// an exception is a record naming the DPDF line, the process untouched.
func TestHostCountsAndExceptions(t *testing.T) {
	dir := t.TempDir()
	lib := buildLib(t, dir, false)
	exe := buildUser(t, dir, lib)
	k, r := start(t, Options{User: true})
	infos, err := k.Insert(compile(t, fmt.Sprintf(`name = %s
modtype = user
vars = 2
offset = glob_fn
minor = 1
pass count = 5
max hits = 10
inc lv,0
push r,rdi
log 1
exit 1
offset = glob_fn
minor = 2
inc lv,1
push d,0
push mrf
exit 1
`, lib)), probe.InsertNew)
	if err != nil || len(infos) != 2 || infos[0].State != probe.StateActive || infos[1].State != probe.StateActive {
		t.Fatalf("insert: %+v %v", infos, err)
	}
	pids := []int{runUser(t, exe, 4), runUser(t, exe, 4), runUser(t, exe, 4), runUser(t, exe, 4)}
	// 16 hits: 1 to 5 skipped by the pass count (the first process's
	// four calls, the second's first), 6 to 15 run (max hits 10: the
	// second's calls i = 1..3, the third's four, the fourth's i = 0..2),
	// the 16th skipped, the probe disabled
	waitFor(t, "10 + 16 records", func() (bool, string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.all) >= 26, fmt.Sprintf("%d records", len(r.all))
	})
	lv, _, err := k.Vars(lib, false)
	if err != nil || lv[0] != 10 || lv[1] != 16 {
		t.Fatalf("lv %v %v, want 10 runs of minor 1, 16 of minor 2", lv, err)
	}
	q := k.Query()
	// the 16th hit finds the probe disabled: a hit, skipped
	if q[0].Hits != 16 || q[0].Skipped != 6 || q[0].State != probe.StateDisabled {
		t.Fatalf("minor 1: %+v, want 16 hits, 6 skipped (5 by the pass count, 1 after max hits), disabled", q[0])
	}
	if q[1].Hits != 16 || q[1].Faults != 16 {
		t.Fatalf("minor 2: %+v, want 16 hits, 16 faults", q[1])
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var runs []string
	exc := 0
	for _, rec := range r.all {
		switch {
		case rec.Minor == 1 && rec.Kind == probe.RecordLog:
			runs = append(runs, fmt.Sprintf("%d:%d", rec.Pid, binary.LittleEndian.Uint64(rec.Data)))
		case rec.Minor == 2 && rec.Kind == probe.RecordException && rec.Exception == "invalid-address" && strings.HasSuffix(rec.Line, ":16:1"):
			exc++
		default:
			t.Fatalf("record %+v", rec)
		}
	}
	want := []string{fmt.Sprintf("%d:1", pids[1]), fmt.Sprintf("%d:2", pids[1]), fmt.Sprintf("%d:3", pids[1])}
	for _, p := range pids[2:] {
		for i := 0; i < 4; i++ {
			want = append(want, fmt.Sprintf("%d:%d", p, i))
		}
	}
	want = want[:10]
	if fmt.Sprint(runs) != fmt.Sprint(want) || exc != 16 {
		t.Fatalf("runs %v, want %v; %d exception records, want 16", runs, want, exc)
	}
}

// startUserLib is startUser with the library taken from dir (another
// copy of it: LD_LIBRARY_PATH comes before the program's RUNPATH).
func startUserLib(t *testing.T, exe, dir string) *user {
	t.Helper()
	t.Setenv("LD_LIBRARY_PATH", dir)
	defer os.Unsetenv("LD_LIBRARY_PATH")
	return startUser(t, exe)
}

// TestHostEveryCopy: a pack inserted for every copy of its build goes on
// the file its name names and on every other file of that build a
// process maps: a copy a process mapped before the insert, and a third
// one mapped only after it (found by the poll); a plain insert reaches
// none of them. Remove takes the int3 out of the copies too.
func TestHostEveryCopy(t *testing.T) {
	dir := t.TempDir()
	lib := buildLib(t, dir, false)
	exe := buildUser(t, dir, lib)
	tab, err := symbols.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	id := tab.BuildID()
	copyTo := func() string {
		d := t.TempDir()
		b, err := os.ReadFile(lib)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "libglob.so"), b, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	dir2, dir3 := copyTo(), copyTo()
	a := startUserLib(t, exe, dir2)
	off, orig := fnOffset(t, lib)
	k, _ := start(t, Options{User: true, Poll: 20 * time.Millisecond})
	plain, _ := start(t, Options{User: true})
	m := compile(t, fmt.Sprintf(globProbe, lib))
	m.BuildID = id
	if infos, err := plain.Insert(m, probe.InsertNew); err != nil || infos[0].State != probe.StateActive || infos[0].Spaces != 1 {
		t.Fatalf("plain insert: %+v %v", infos, err)
	}
	m2 := compile(t, fmt.Sprintf(globProbe, lib))
	m2.BuildID = id
	infos, err := k.InsertPackCopies([]*rpn.Module{m2}, probe.InsertNew)
	if err != nil || infos[0].State != probe.StateActive || infos[0].Spaces != 2 {
		t.Fatalf("insert for every copy: %+v %v; want active on the file and the copy process %d maps", infos, err, a.pid())
	}
	if b := textByte(t, a.pid(), filepath.Join(dir2, "libglob.so"), off); b != 0xcc {
		t.Fatalf("the copy in process %d has %#02x at glob_fn, not the int3", a.pid(), b)
	}
	a.call(10)
	runUser(t, exe, 5) // the file itself
	c := startUserLib(t, exe, dir3)
	waitFor(t, "the third copy found", func() (bool, string) {
		q := k.Query()
		return q[0].Spaces == 3, fmt.Sprintf("%+v", q[0])
	})
	c.call(7)
	waitFor(t, "22 calls counted", func() (bool, string) {
		lv, _, _ := k.Vars(lib, false)
		return lv[0] == 22, fmt.Sprint(lv)
	})
	if lv, _, _ := plain.Vars(lib, false); lv[0] != 5 {
		t.Fatalf("the plain insert counted %d calls, want the file's 5 only", lv[0])
	}
	if _, err := k.Remove(lib, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Remove(lib, nil); err != nil {
		t.Fatal(err)
	}
	for _, u := range []struct {
		u   *user
		dir string
	}{{a, dir2}, {c, dir3}} {
		if b := textByte(t, u.u.pid(), filepath.Join(u.dir, "libglob.so"), off); b != orig {
			t.Fatalf("process %d has %#02x at its copy's glob_fn after remove, the file %#02x", u.u.pid(), b, orig)
		}
	}
	if n := ownLinks(t); n != 0 {
		t.Fatalf("%d eBPF links still held after remove", n)
	}
}
