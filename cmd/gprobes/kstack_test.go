package main

import (
	"debug/elf"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gprobes/gprobes/internal/testkit"
)

// stackRecord is a record's stacks as log --json has them.
type stackRecord struct {
	Pid    int
	Data   string
	Stacks []struct {
		Kind   string
		Frames []struct {
			Address  string
			Function string
			Offset   uint64
			Module   string
		}
	}
}

// The kernel target's stacks (bpf_get_stack) on this host's kernel, at
// the tracepoint syscalls:sys_enter_getppid, which testdata/stacks/fact.c
// reaches from leaf at the bottom of 4 levels of recursion. log kstack:
// the kernel's frames, every one named in vmlinux, the system call's
// entry among them. log ustack (BPF_F_USER_STACK walks frame pointers):
// in the build with frame pointers, getppid in libc, then fact x4, run
// and main, each return address preceded in the file by a call of the
// frame below (leaf has no frame of its own at a call it makes: a frame
// pointer walk from getppid goes from its caller's caller); in the gcc
// -O2 build, the first frame is still getppid. The records are read from
// the daemon's log while the fixture waits, so its maps name the frames.
func TestKernelStacks(t *testing.T) {
	needKernelBPF(t)
	dir := t.TempDir()
	sock, state := filepath.Join(dir, "d.sock"), filepath.Join(dir, "state")
	daemonProcess(t, sock, state)
	for _, b := range []struct {
		name  string
		flags []string
		fp    bool
	}{
		{"fact-fp", []string{"-O2", "-fno-omit-frame-pointer"}, true},
		{"fact-O2", []string{"-O2"}, false},
	} {
		prog := testkit.CC(t, b.name, append(b.flags, "../../testdata/stacks/fact.c")...)
		cmd := exec.Command(prog, "3", "1", "getppid")
		stdin, _ := cmd.StdinPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		name := "vmlinux"
		src := filepath.Join(dir, b.name+".dpdf")
		os.WriteFile(src, []byte(fmt.Sprintf(`name = %s
modtype = kernel
tracepoint = syscalls:sys_enter_getppid
push pid
push d,%d
sub
jnz other
log kstack,32
log ustack,32
exit 1
other:
exit 0
`, name, cmd.Process.Pid)), 0o644)
		mustRun(t, "insert", "--socket", sock, "--target", "kernel", src)
		fmt.Fprintln(stdin)
		var rec stackRecord
		testkit.Wait(t, time.Minute, "the record of the fixture's getppid", func() (bool, string) {
			out := mustRun(t, "log", "--socket", sock, "--json")
			for _, l := range strings.Split(out, "\n") {
				var r stackRecord
				if json.Unmarshal([]byte(l), &r) == nil && r.Pid == cmd.Process.Pid {
					rec = r
					return true, ""
				}
			}
			return false, out
		})
		text := mustRun(t, "log", "--socket", sock)
		fmt.Fprintln(stdin)
		if err := cmd.Wait(); err != nil {
			t.Fatalf("the fixture: %v", err)
		}
		mustRun(t, "remove", "--socket", sock, "--target", "kernel", name)

		if len(rec.Stacks) != 2 || rec.Stacks[0].Kind != "kernel" || rec.Stacks[1].Kind != "user" || len(rec.Data) != 2*2*32*8 {
			t.Fatalf("%s: record %+v", b.name, rec)
		}
		k := rec.Stacks[0].Frames
		var kn []string
		for _, f := range k {
			kn = append(kn, f.Function)
			if f.Function == "" || f.Module != "vmlinux" {
				t.Errorf("%s: kernel frame %+v not named in vmlinux", b.name, f)
			}
		}
		if len(k) < 2 || !strings.Contains(strings.Join(kn, " "), "do_syscall_64") {
			t.Errorf("%s: kernel frames %v: want the system call's entry", b.name, kn)
		}
		u := rec.Stacks[1].Frames
		if len(u) == 0 || u[0].Function != "getppid" || !strings.Contains(u[0].Module, "libc") {
			t.Fatalf("%s: user frames %+v: want getppid in libc first", b.name, u)
		}
		if !b.fp {
			t.Logf("%s (no frame pointers): user frames %+v", b.name, u)
			continue
		}
		want := []string{"getppid", "fact", "fact", "fact", "fact", "run", "main"}
		var un []string
		for _, f := range u {
			un = append(un, f.Function)
		}
		if len(un) < len(want) || strings.Join(un[:len(want)], " ") != strings.Join(want, " ") {
			t.Fatalf("%s: user frames %v, want %v first", b.name, un, want)
		}
		syms := elfFuncs(t, prog)
		callee := []string{"leaf", "fact", "fact", "fact", "fact", "run"}
		for i := 1; i < len(want); i++ {
			file := syms[want[i]] + u[i].Offset // the return address in the file
			if u[i].Module != prog || !callBefore(t, prog, file, syms[callee[i-1]]) {
				t.Errorf("%s: frame %d %+v: the instruction before it is no call of %s", b.name, i, u[i], callee[i-1])
			}
		}
		// log shows them one per line
		for _, w := range []string{"\n    do_syscall_64+0x", "\n    getppid+0x", "\n    fact+0x", " (" + prog + ")"} {
			if !strings.Contains(text, w) {
				t.Errorf("%s: log's text has no %q:\n%s", b.name, w, text)
			}
		}
	}
}

// elfFuncs are a file's function symbols' addresses by name.
func elfFuncs(t *testing.T, path string) map[string]uint64 {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, _ := f.Symbols()
	out := map[string]uint64{}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 {
			out[s.Name] = s.Value
		}
	}
	return out
}

// callBefore reports whether the 5 bytes before the file address ret are
// a call rel32 of to.
func callBefore(t *testing.T, path string, ret, to uint64) bool {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && ret-5 >= p.Vaddr && ret <= p.Vaddr+p.Filesz {
			b := make([]byte, 5)
			if _, err := p.ReadAt(b, int64(ret-5-p.Vaddr)); err != nil || b[0] != 0xe8 {
				return false
			}
			return ret+uint64(int64(int32(binary.LittleEndian.Uint32(b[1:])))) == to
		}
	}
	return false
}
