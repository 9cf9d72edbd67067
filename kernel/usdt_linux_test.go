//go:build linux

package kernel

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/internal/testkit"
	"github.com/gprobes/gprobes/probe"
)

// usdtProg builds testdata/usdtprog.c and usdtguard.c (sys/sdt.h's
// probes: app:tick plain, app:guarded behind its semaphore).
func usdtProg(t *testing.T) string {
	t.Helper()
	testkit.NeedSDT(t)
	return testkit.CC(t, "usdtprog", "-O1", "testdata/usdtprog.c", "testdata/usdtguard.c")
}

// usdtProc is a usdtprog process.
type usdtProc struct {
	t   *testing.T
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func startUSDT(t *testing.T, exe string) *usdtProc {
	t.Helper()
	cmd := exec.Command(exe)
	in, _ := cmd.StdinPipe()
	outp, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	u := &usdtProc{t: t, cmd: cmd, in: in, out: bufio.NewReader(outp)}
	t.Cleanup(func() { in.Close(); cmd.Process.Kill(); cmd.Wait() })
	if l, err := u.out.ReadString('\n'); err != nil || l != "ready\n" {
		t.Fatalf("usdtprog: %q %v", l, err)
	}
	return u
}

// rounds runs n rounds and returns how many found app:guarded's
// semaphore set.
func (u *usdtProc) rounds(n int) int {
	u.t.Helper()
	fmt.Fprintf(u.in, "%d\n", n)
	l, err := u.out.ReadString('\n')
	var got, enabled int
	if err != nil || func() bool { _, e := fmt.Sscanf(l, "done %d enabled %d", &got, &enabled); return e != nil }() || got != n {
		u.t.Fatalf("usdtprog after %d rounds: %q %v", n, l, err)
	}
	return enabled
}

// TestHostUSDT: usdt = PROVIDER:NAME probes a static probe of sys/sdt.h
// in every process: push arg,N reads its arguments where its note says
// (registers here), signed values sign-extended, a pointer read with log
// str; a probe behind a semaphore is enabled in the running process by
// the insert (the kernel counts the semaphore up) and disabled again by
// remove, so the program computes its arguments only while a probe is
// in; a name the file lacks is refused naming those it has.
func TestHostUSDT(t *testing.T) {
	exe := usdtProg(t)
	k, r := start(t, Options{User: true})
	proc := startUSDT(t, exe)
	if e := proc.rounds(3); e != 0 {
		t.Fatalf("app:guarded enabled in %d rounds before any probe", e)
	}
	infos, err := k.Insert(compile(t, fmt.Sprintf(`name = %s
modtype = user
vars = 2
usdt = app:tick
minor = 1
inc lv,0
push arg,1
push arg,2
log 2
push d,16
push arg,3
log str
exit 1
usdt = app:guarded
minor = 2
inc lv,1
push arg,1
log 1
exit 1
usdt = app:nosuch
minor = 3
exit 0
usdt = app:more
minor = 4
push arg,1
push arg,2
push arg,3
log 3
exit 1
`, exe)), probe.InsertNew)
	if err != nil || len(infos) != 4 {
		t.Fatalf("insert: %+v %v", infos, err)
	}
	for _, i := range []probe.Info{infos[0], infos[1], infos[3]} {
		if i.State != probe.StateActive || i.How != "usdt" {
			t.Fatalf("%s: %s %s %s", i.Location, i.State, i.How, i.Reason)
		}
	}
	if i := infos[2]; i.State != probe.StateRefused || !strings.Contains(i.Reason, "has no such static probe (it has app:tick, app:more, app:guarded)") {
		t.Fatalf("app:nosuch: %s %s", i.State, i.Reason)
	}
	if e := proc.rounds(10); e != 10 {
		t.Fatalf("app:guarded enabled in %d of 10 rounds with its probe in", e)
	}
	other := startUSDT(t, exe) // started with the probes in: enabled too
	if e := other.rounds(4); e != 4 {
		t.Fatalf("a process started after the insert: app:guarded enabled in %d of 4 rounds", e)
	}
	waitFor(t, "42 records", func() (bool, string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.all) >= 42, fmt.Sprintf("%d records", len(r.all))
	})
	lv, _, _ := k.Vars(exe, false)
	if lv[0] != 14 || lv[1] != 14 {
		t.Fatalf("lv %v, want 14 ticks, 14 guarded", lv)
	}
	r.mu.Lock()
	seen := map[string]int{}
	for _, rec := range r.all {
		key := fmt.Sprintf("%d/%d", rec.Pid, rec.Minor)
		i := int64(seen[key])
		seen[key]++
		le := binary.LittleEndian
		switch rec.Minor {
		case 1:
			if len(rec.Data) != 16+len("usdt-arg") || int64(le.Uint64(rec.Data)) != i || int64(le.Uint64(rec.Data[8:])) != -i || string(rec.Data[16:]) != "usdt-arg" {
				r.mu.Unlock()
				t.Fatalf("app:tick record %d of %d: %x %q", i, rec.Pid, rec.Data, rec.Data)
			}
		case 2:
			if len(rec.Data) != 8 || int64(le.Uint64(rec.Data)) != 3*i {
				r.mu.Unlock()
				t.Fatalf("app:guarded record %d of %d: %x, want %d", i, rec.Pid, rec.Data, 3*i)
			}
		case 4:
			// -4@%eax, -2@%dx: sign-extended from their width; 8@8(%rsp)
			if len(rec.Data) != 24 || int64(le.Uint64(rec.Data)) != -i || int64(le.Uint64(rec.Data[8:])) != i-2 || int64(le.Uint64(rec.Data[16:])) != 5*i {
				r.mu.Unlock()
				t.Fatalf("app:more record %d of %d: %x, want %d %d %d", i, rec.Pid, rec.Data, -i, i-2, 5*i)
			}
		default:
			r.mu.Unlock()
			t.Fatalf("record %+v", rec)
		}
	}
	r.mu.Unlock()
	a, b := proc.cmd.Process.Pid, other.cmd.Process.Pid
	want := map[string]int{fmt.Sprintf("%d/1", a): 10, fmt.Sprintf("%d/2", a): 10, fmt.Sprintf("%d/4", a): 10,
		fmt.Sprintf("%d/1", b): 4, fmt.Sprintf("%d/2", b): 4, fmt.Sprintf("%d/4", b): 4}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("records by process/minor %v, want %v", seen, want)
	}
	if _, err := k.Remove(exe, nil); err != nil {
		t.Fatal(err)
	}
	if e := proc.rounds(5); e != 0 {
		t.Fatalf("app:guarded still enabled in %d of 5 rounds after remove", e)
	}
	if e := other.rounds(5); e != 0 {
		t.Fatalf("app:guarded still enabled in %d of 5 rounds after remove (the process started after the insert)", e)
	}
	if n, err := UprobeLinks(exe); n != 0 || err != nil {
		t.Fatalf("%d uprobe links on %s after remove (%v)", n, filepath.Base(exe), err)
	}
}

// parseUSDTArgs reads every operand form sys/sdt.h writes on x86-64 but an
// index register and a symbol, which it refuses naming the argument.
func TestUSDTArgs(t *testing.T) {
	got, err := parseUSDTArgs("-4@%edi 8@%r13 -2@%ax 1@%sil 4@%r9d 8@-16(%rbp) -8@(%rax) 4@$-5 8@$0x10", 0x1000)
	if err != nil {
		t.Fatal(err)
	}
	want := "[{1 4 true rdi 0} {1 8 false r13 0} {1 2 true rax 0} {1 1 false rsi 0} {1 4 false r9 0} {2 8 false rbp -16} {2 8 true rax 0} {0 4 false rax -5} {0 8 false rax 16}]"
	if fmt.Sprint(got) != want {
		t.Fatalf("got  %v\nwant %s", got, want)
	}
	for _, c := range []struct{ in, want string }{
		{"8@8(%rax,%rbx,8)", `argument 1 "8@8(%rax,%rbx,8)": an index register: not read by gprobes`},
		{"4@%eax 8@counter(%rip)", `argument 2 "8@counter(%rip)": a displacement gprobes does not read`},
		{"3@%eax", `argument 1 "3@%eax": size "3"`},
		{"4@%ah", `argument 1 "4@%ah": register %ah: not one gprobes reads`},
		{"%eax", `argument 1 "%eax": no SIZE@`},
	} {
		if _, err := parseUSDTArgs(c.in, 0); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.in, err, c.want)
		}
	}
}

// Every static probe of this machine's python3 and libstdc++ (when they
// have notes) is found, and its arguments read.
func TestUSDTNotesOfThisMachine(t *testing.T) {
	n := 0
	for _, f := range []string{"/usr/bin/python3", "/usr/lib/x86_64-linux-gnu/libstdc++.so.6"} {
		path, err := filepath.EvalSymlinks(f)
		if err != nil {
			continue
		}
		_, all, err := usdtSites(path, "", "")
		if err != nil {
			continue
		}
		for _, pn := range all {
			prov, name, _ := strings.Cut(pn, ":")
			sites, _, err := usdtSites(path, prov, name)
			if err != nil || len(sites) == 0 {
				t.Fatalf("%s %s: %d sites, %v", path, pn, len(sites), err)
			}
			for _, s := range sites {
				if s.ArgErr != "" {
					t.Errorf("%s %s at %#x: %s", path, pn, s.PC, s.ArgErr)
				}
				n++
			}
		}
	}
	if n == 0 {
		testkit.SkipOrFail(t, "neither python3 nor libstdc++ here has static probes")
	}
	t.Logf("%d sites read", n)
}

// A real program's static probe: python3's python:audit, behind its
// semaphore (CPython computes an audit event only while a hook or a
// probe wants it), its first argument the event's name: a python3 run
// after the insert has its os.listdir event recorded, by its pid.
func TestHostUSDTPython(t *testing.T) {
	// the system's python3 (a python3 first in PATH may be a shim)
	py, err := filepath.EvalSymlinks("/usr/bin/python3")
	if err != nil {
		testkit.SkipOrFail(t, "no /usr/bin/python3")
	}
	if _, all, err := usdtSites(py, "", ""); err != nil || !strings.Contains(strings.Join(all, " "), "python:audit") {
		testkit.SkipOrFail(t, "%s has no python:audit static probe (%v)", py, err)
	}
	k, r := start(t, Options{User: true})
	infos, err := k.Insert(compile(t, fmt.Sprintf("name = %s\nmodtype = user\nusdt = python:audit\npush d,64\npush arg,1\nlog str\nexit 1\n", py)), probe.InsertNew)
	if err != nil || infos[0].State != probe.StateActive {
		t.Fatalf("insert: %+v %v", infos, err)
	}
	cmd := exec.Command(py, "-c", "import os; os.listdir('/')")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("python3: %v %s", err, out)
	}
	pid := cmd.Process.Pid
	waitFor(t, "the os.listdir audit event", func() (bool, string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		var names []string
		for _, rec := range r.all {
			if rec.Pid == pid {
				names = append(names, string(rec.Data))
			}
		}
		for _, n := range names {
			if n == "os.listdir" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events of %d: %q", len(names), pid, names)
	})
}
