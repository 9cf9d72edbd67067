//go:build linux

package ptrace_test

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/internal/testkit"
	"github.com/gprobes/gprobes/probe"
)

// stackFixture builds testdata/stacks/fact.c with the flags given.
func stackFixture(t *testing.T, name string, flags ...string) string {
	return testkit.CC(t, name, append(flags, "../testdata/stacks/fact.c")...)
}

// elfSyms are a fixture's function symbols by name.
func elfSyms(t *testing.T, path string) map[string]elf.Symbol {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]elf.Symbol{}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 {
			out[s.Name] = s
		}
	}
	return out
}

// callTarget is where the call instruction just before a return address
// (a file address) goes: the 5-byte call rel32 gcc emits for a direct
// call. ok false when the bytes there are no such call.
func callTarget(t *testing.T, path string, ret uint64) (uint64, bool) {
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
				return 0, false
			}
			return ret + uint64(int64(int32(binary.LittleEndian.Uint32(b[1:])))), true
		}
	}
	return 0, false
}

// The user stack of a hit (log ustack) on the int3 route, in a binary
// built with gcc -O2 (no frame pointers: the CFI of .eh_frame unwinds it)
// and one with -fno-omit-frame-pointer, through recursion: at leaf, the
// frames are leaf, fact N+1 times, run, main, then libc's start and
// _start, as gdb's bt has them. Each return address in the fixture is
// checked against the code: the bytes before it are a call of the frame
// below it. The names are function+offset of the fixture's symbols.
// log ustack,3 keeps 3 frames and zeros; log kstack in a process is an
// invalid-operand exception. A probe with log ustack is refused a jump
// pad (route auto) with the reason in HOW.
func TestUstack(t *testing.T) {
	const depth = 4
	for _, b := range []struct {
		name  string
		flags []string
	}{
		{"fact-O2", []string{"-O2"}},
		{"fact-fp", []string{"-O2", "-fno-omit-frame-pointer"}},
	} {
		t.Run(b.name, func(t *testing.T) {
			prog := stackFixture(t, b.name, b.flags...)
			syms := elfSyms(t, prog)
			r := startWith(t, startConfig{path: prog}, fmt.Sprint(depth), "2")
			infos := r.insert(compileFor(t, prog, `name = PROGRAM
modtype = user
offset = leaf
minor = 1
log ustack
exit 1
offset = leaf
minor = 2
push d,7
log 1
log ustack,3
exit 1
offset = run
minor = 3
log kstack
exit 1
retprobe = fact
minor = 4
log ustack
exit 1
`))
			for _, p := range infos {
				if p.Minor == 1 && (!strings.HasPrefix(p.How, "int3") || !strings.Contains(p.How, "stacks are unwound on the int3 route")) {
					t.Errorf("probe %d: how %q: want the int3 route, for its stack", p.Minor, p.How)
				}
			}
			r.release()
			r.finish()

			recs := r.records(1)
			if len(recs) != 2 {
				t.Fatalf("%d records of leaf, want 2: %+v", len(recs), recs)
			}
			for _, rec := range recs {
				bias := rec.Address - syms["leaf"].Value
				if len(rec.Stacks) != 1 || rec.Stacks[0].Kind != "user" {
					t.Fatalf("stacks %+v: want one user stack", rec.Stacks)
				}
				fr := rec.Stacks[0].Frames
				var names []string
				for _, f := range fr {
					names = append(names, f.Function)
				}
				want := []string{"leaf"}
				for i := 0; i <= depth; i++ {
					want = append(want, "fact")
				}
				want = append(want, "run", "main")
				if len(names) < len(want)+1 || strings.Join(names[:len(want)], " ") != strings.Join(want, " ") {
					t.Fatalf("frames %v, want %v then libc's", fr, want)
				}
				if last := fr[len(fr)-1]; last.Function != "_start" || last.Module != prog {
					t.Errorf("outermost frame %v, want _start in %s", last, prog)
				}
				// between main and _start: libc's start, unwound with libc's
				// own CFI at its load address (named from .dynsym, or its
				// debug file's local symbols where installed)
				libc := false
				for _, f := range fr[len(want) : len(fr)-1] {
					if !strings.Contains(f.Module, "libc") {
						t.Errorf("frame %v between main and _start is not libc's", f)
					}
					libc = libc || f.Function == "__libc_start_main"
				}
				if !libc {
					t.Errorf("frames %v: no __libc_start_main", fr)
				}
				if fr[0].Address != probe.Hex(rec.Address) || fr[0].Offset != 0 {
					t.Errorf("frame 0 %v, want leaf+0x0 at %#x", fr[0], rec.Address)
				}
				// each return address follows a call of the frame below
				for i := 1; i < len(want); i++ {
					ret := uint64(fr[i].Address) - bias
					to, ok := callTarget(t, prog, ret)
					if !ok || to != syms[want[i-1]].Value {
						t.Errorf("frame %d %v: the instruction before %#x calls %#x (%v), want %s at %#x", i, fr[i], ret, to, ok, want[i-1], syms[want[i-1]].Value)
					}
					if fr[i].Module != prog || uint64(fr[i].Address)-bias-syms[want[i]].Value != fr[i].Offset {
						t.Errorf("frame %d %v: want %s+%#x (%s)", i, fr[i], want[i], uint64(fr[i].Address)-bias-syms[want[i]].Value, prog)
					}
				}
				// the data holds the addresses, 16 words, zeros after the last
				if len(rec.Data) != 16*8 {
					t.Fatalf("data %d bytes, want 128", len(rec.Data))
				}
				for i := 0; i < 16; i++ {
					w := binary.LittleEndian.Uint64(rec.Data[8*i:])
					if i < len(fr) && w != uint64(fr[i].Address) || i >= len(fr) && w != 0 {
						t.Errorf("data word %d %#x, frames %v", i, w, fr)
					}
				}
				if testing.Verbose() {
					t.Logf("frames %v", fr)
				}
				if g := gdbFrames(t, prog, depth); g != nil {
					ours := relFrames(fr, prog, bias)
					if strings.Join(ours, " ") != strings.Join(g, " ") {
						t.Errorf("frames in %s: ours %v, gdb's bt %v", prog, ours, g)
					}
				}
			}

			for _, rec := range r.records(2) {
				if len(rec.Data) != 8+3*8 || binary.LittleEndian.Uint64(rec.Data) != 7 {
					t.Fatalf("log ustack,3: data %x", rec.Data)
				}
				fr := rec.Stacks[0].Frames
				if len(fr) != 3 || fr[0].Function != "leaf" || fr[1].Function != "fact" || fr[2].Function != "fact" {
					t.Errorf("log ustack,3: frames %v", fr)
				}
			}
			// a return probe runs as the function returns: its first frame
			// is where fact(k) returns to, fact(k+1), or run for the
			// outermost; the returns come innermost first
			rets := r.records(4)
			if len(rets) != 2*(depth+1) {
				t.Fatalf("%d records of fact's returns, want %d", len(rets), 2*(depth+1))
			}
			for i, rec := range rets {
				k := i % (depth + 1)
				fr := rec.Stacks[0].Frames
				var names []string
				for _, f := range fr {
					names = append(names, f.Function)
				}
				want := strings.Repeat("fact ", depth-k) + "run main"
				if len(names) < depth-k+2 || strings.Join(names[:depth-k+2], " ") != want {
					t.Errorf("return of fact(%d): frames %v, want %s first", k, fr, want)
				}
			}
			ks := r.records(3)
			if len(ks) != 2 || ks[0].Kind != "exception" || ks[0].Exception != "invalid-operand" || len(ks[0].Stacks) != 0 {
				t.Errorf("log kstack in a process: %+v, want invalid-operand exceptions", ks)
			}
		})
	}
}

// Go code has no .eh_frame: its .debug_frame (compressed, as the Go
// linker writes it) unwinds it. testdata/retprobe/gowork in grow mode,
// one goroutine: main.deep recursing 25 levels under main.work, under
// main.descend recursing i+1 levels (i 0, 3, 6, 9), in a goroutine: at
// each deep, the frames are deep k times, work, descend m times (m one
// of 1, 4, 7, 10), main's closures, then runtime.goexit, every one named
// in the binary, through the stack copies of a growing goroutine.
func TestUstackGo(t *testing.T) {
	bin := goFixture(t)
	r := startWith(t, startConfig{path: bin}, "grow", "1", "10")
	r.insert(compileFor(t, bin, "name = PROGRAM\nmodtype = user\noffset = main.deep\nlog ustack,64\nexit 1\n"))
	r.release()
	r.finish()
	recs := r.records(0)
	// 100 calls; a call whose prologue grows the stack starts again at
	// its entry (runtime.morestack): a hit more each time
	if len(recs) < 4*25 {
		t.Fatalf("%d records, want 100 or more", len(recs))
	}
	for _, rec := range recs {
		fr := rec.Stacks[0].Frames
		i := 0
		for i < len(fr) && fr[i].Function == "main.deep" {
			i++
		}
		j := i + 1
		for j < len(fr) && fr[j].Function == "main.descend" {
			j++
		}
		if i < 1 || i > 25 || i >= len(fr) || fr[i].Function != "main.work" || !strings.Contains(" 1 4 7 10 ", fmt.Sprintf(" %d ", j-i-1)) ||
			!strings.HasPrefix(fr[len(fr)-1].Function, "runtime.goexit") {
			t.Fatalf("frames %v: want main.deep 1-25 times, main.work, main.descend 1, 4, 7 or 10 times, ..., runtime.goexit", fr)
		}
		for _, f := range fr {
			if f.Function == "" || f.Module != bin {
				t.Errorf("frame %v not named in %s", f, bin)
			}
		}
	}
}

// Through a signal frame: testdata/stacks/fact.c's signal mode sends
// itself SIGUSR1 with kill(2) from fact(0); at the handler, the frames are
// handler, libc's sigreturn trampoline (__restore_rt: its CFI, marked a
// signal frame, finds the interrupted registers in the ucontext by DWARF
// expressions), kill itself at the address it was interrupted (exact, not
// a return address: kill+0x7, not the function before), then fact x3,
// run, main, libc's start, _start; gdb's bt agrees on the frames in the
// fixture. Before, the walk ended at the trampoline.
func TestUstackSignal(t *testing.T) {
	prog := stackFixture(t, "fact-O2", "-O2")
	syms := elfSyms(t, prog)
	r := startWith(t, startConfig{path: prog}, "2", "1", "signal")
	r.insert(compileFor(t, prog, "name = PROGRAM\nmodtype = user\noffset = handler\nlog ustack,64\nexit 1\n"))
	r.release()
	r.finish()
	recs := r.records(0)
	if len(recs) != 1 {
		t.Fatalf("%d records, want 1", len(recs))
	}
	fr := recs[0].Stacks[0].Frames
	var names []string
	for _, f := range fr {
		names = append(names, f.Function)
	}
	if len(fr) < 10 || fr[0].Function != "handler" || !strings.Contains(fr[1].Module, "libc") || fr[2].Function != "kill" || !strings.Contains(fr[2].Module, "libc") ||
		strings.Join(names[3:8], " ") != "fact fact fact run main" || names[len(names)-1] != "_start" {
		t.Fatalf("frames %v: want handler, libc's trampoline, kill, fact x3, run, main, ..., _start", fr)
	}
	if fr[1].Function != "" && fr[1].Function != "__restore_rt" {
		t.Errorf("frame 1 %v: want libc's __restore_rt (or no name without libc's debug file)", fr[1])
	}
	// kill's frame is where it was when the signal came: after its
	// syscall instruction, inside kill
	if fr[2].Offset == 0 {
		t.Errorf("frame 2 %v: want an address inside kill", fr[2])
	}
	bias := recs[0].Address - syms["handler"].Value
	if _, ok := callTarget(t, prog, uint64(fr[3].Address)-bias); !ok {
		t.Errorf("frame 3 %v: the instruction before it is no call (of kill's PLT entry)", fr[3])
	}
	if g := gdbSignalFrames(t, prog); g != nil {
		if ours := relFrames(fr, prog, bias); strings.Join(ours, " ") != strings.Join(g, " ") {
			t.Errorf("frames in %s: ours %v, gdb's bt %v", prog, ours, g)
		}
	}
}

// gdbSignalFrames is gdbFrames at handler, the signal passed to the
// program.
func gdbSignalFrames(t *testing.T, prog string) []string {
	t.Helper()
	if _, err := exec.LookPath("gdb"); err != nil {
		return nil
	}
	out, err := exec.Command("gdb", "-nx", "-batch", "-ex", "set debuginfod enabled off", "-ex", "set backtrace past-main on",
		"-ex", "handle SIGUSR1 nostop noprint pass", "-ex", "break handler", "-ex", "run", "-ex", "p/x $pc", "-ex", "info symbol $pc", "-ex", "bt", "-ex", "kill",
		"--args", prog, "2", "1", "signal").CombinedOutput()
	if err != nil {
		t.Fatalf("gdb: %v\n%s", err, out)
	}
	return gdbParse(t, prog, "handler", out)
}

// relFrames are the callers' frames in the fixture as file addresses.
func relFrames(fr []probe.Frame, prog string, bias uint64) []string {
	var out []string
	for _, f := range fr[1:] {
		if f.Module == prog {
			out = append(out, fmt.Sprintf("%#x", uint64(f.Address)-bias))
		}
	}
	return out
}

// gdbFrames runs the fixture under gdb to leaf and returns the callers'
// frames of gdb's bt (past main, to _start) that are in the fixture, as
// file addresses (gdb stops past leaf's prologue: frame 0 differs) (nil without gdb: the call checks above stand alone).
func gdbFrames(t *testing.T, prog string, depth int) []string {
	t.Helper()
	if _, err := exec.LookPath("gdb"); err != nil {
		return nil
	}
	out, err := exec.Command("gdb", "-nx", "-batch", "-ex", "set debuginfod enabled off", "-ex", "set backtrace past-main on", "-ex", "break leaf", "-ex", "run",
		"-ex", "p/x $pc", "-ex", "info symbol $pc", "-ex", "bt", "-ex", "kill", "--args", prog, fmt.Sprint(depth), "1").CombinedOutput()
	if err != nil {
		t.Fatalf("gdb: %v\n%s", err, out)
	}
	return gdbParse(t, prog, "leaf", out)
}

// gdbParse reads the callers' frames in prog from gdb's output of p/x $pc,
// info symbol $pc and bt, stopped in function fn.
func gdbParse(t *testing.T, prog, fn string, out []byte) []string {
	t.Helper()
	pc := regexp.MustCompile(`(?m)^\$1 = (0x[0-9a-f]+)`).FindSubmatch(out)
	if pc == nil {
		t.Fatalf("gdb printed no pc:\n%s", out)
	}
	at, _ := strconv.ParseUint(string(pc[1]), 0, 64)
	// gdb stops past fn's prologue: "leaf + 4 in section .text"
	var skip uint64
	if m := regexp.MustCompile(`(?m)^` + fn + ` \+ (\d+) in section`).FindSubmatch(out); m != nil {
		skip, _ = strconv.ParseUint(string(m[1]), 10, 64)
	} else if !regexp.MustCompile(`(?m)^` + fn + ` in section`).Match(out) {
		t.Fatalf("gdb stopped elsewhere than in %s:\n%s", fn, out)
	}
	bias := at - skip - elfSyms(t, prog)[fn].Value
	var rel []string
	for _, m := range regexp.MustCompile(`(?m)^#[1-9]\d*\s+(0x[0-9a-f]+) in (\S+)`).FindAllSubmatch(out, -1) {
		a, _ := strconv.ParseUint(string(m[1]), 0, 64)
		if _, ok := elfSyms(t, prog)[string(m[2])]; ok {
			rel = append(rel, fmt.Sprintf("%#x", a-bias))
		}
	}
	if len(rel) == 0 {
		t.Fatalf("gdb's bt has no frame in the fixture:\n%s", out)
	}
	return rel
}
