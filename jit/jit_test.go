//go:build linux && amd64

package jit_test

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gprobes/gprobes/compiler"
	"github.com/gprobes/gprobes/dpdf"
	"github.com/gprobes/gprobes/jit"
	"github.com/gprobes/gprobes/rpn"
)

var headerKeys = map[string]bool{"name": true, "modtype": true, "major": true, "jmpmax": true,
	"logmax": true, "dfltexit": true, "vars": true, "gvars": true, "arch": true}

// compileSrc builds a one-probe program from DPDF text: header keywords,
// probe keywords and code, in any order; name, modtype and offset are
// added when missing.
func compileSrc(t testing.TB, src string) *rpn.Program {
	t.Helper()
	var hdr, body []string
	hasName, hasType := false, false
	for _, l := range strings.Split(src, "\n") {
		k := strings.ToLower(strings.TrimSpace(strings.SplitN(l, "=", 2)[0]))
		if strings.Contains(l, "=") && headerKeys[k] {
			hasName = hasName || k == "name"
			hasType = hasType || k == "modtype"
			hdr = append(hdr, l)
		} else {
			body = append(body, l)
		}
	}
	if !hasName {
		hdr = append(hdr, "name = test")
	}
	if !hasType {
		hdr = append(hdr, "modtype = user")
	}
	text := strings.Join(hdr, "\n") + "\noffset = 0x1000\n" + strings.Join(body, "\n") + "\n"
	f, err := dpdf.ParseSource("test", []byte(text), dpdf.Options{NoPreprocessor: true})
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	p, err := compiler.CompileProgram(f, rpn.CompileOptions{})
	if err != nil {
		var b strings.Builder
		dpdf.PrintError(&b, err, false)
		t.Fatalf("%s\n%s", b.String(), text)
	}
	return p
}

// runDiff runs hits hits of p on both sides with random registers.
func runDiff(t *testing.T, h *harness, p *rpn.Program, hits int, setup func(*hitSetup)) {
	t.Helper()
	r, err := h.start(p)
	if err != nil {
		t.Fatalf("compile: %v\n%s", err, p.Listing(0))
	}
	for i := 0; i < hits; i++ {
		s := h.randomSetup()
		if setup != nil {
			setup(&s)
		}
		if d := r.hit(s); d != "" {
			t.Fatalf("hit %d: %s\n%s", i+1, d, p.Listing(0))
		}
	}
}

// Programs for every group of instructions, each run against the machine
// for a few hits with random registers.
var tableCases = []struct{ name, src string }{
	{"push r log exit", "push r,rdi\npush r,rsi\nlog 2\nexit 1"},
	{"every general register", "push r,rax\npush r,rbx\npush r,rcx\npush r,rdx\npush r,rsi\npush r,rdi\npush r,rbp\npush r,rsp\nlog 8\npush r,r8\npush r,r9\npush r,r10\npush r,r11\npush r,r12\npush r,r13\npush r,r14\npush r,r15\npush r,rip\npush r,rflags\nlog 10\nexit 2"},
	{"32-bit views", "push r,eax\npush r,r9d\npush r,eip\npush r,eflags\npush r,esp\nlog 5\nexit 1"},
	{"segments and bases", "push r,cs\npush r,ss\npush r,ds\npush r,es\npush r,fs\npush r,gs\npush r,fs_base\npush r,gs_base\nlog 8\nexit 1"},
	{"pop r", "push r,rax\npush d,1\nadd\npop r,rbx\npush d,-1\npop r,ecx\npush d,7\npop r,rflags\npush d,0x1234567890\npop r,r15d\nexit 1"},
	{"push d", "push d,0\npush d,0x7fffffff\npush d,0x80000000\npush d,0xffffffff\npush d,-1\npush d,0x123456789abcdef0\nlog 6\nexit 1"},
	{"exit 0", "push d,1\nlog 1\nexit 0"},
	{"abort", "push d,1\nlog 1\nabort"},
	{"rem", "push d,1\nlog 1\nrem"},
	{"exit 2 empty log", "exit 2"},
	{"arith", "push r,rax\npush r,rbx\nadd\npush r,rcx\nsub\npush r,rdx\nmul\npush r,rsi\nand\npush r,rdi\nor\npush r,r8\nxor\nnot\nneg\nlog 1\nexit 1"},
	{"div", "push r,rax\npush r,rbx\npush d,1\nor\ndiv\nlog 2\npush d,-7\npush d,2\ndiv\nlog 2\nexit 1"},
	{"div by zero", "push d,5\npush d,0\ndiv\nexit 1"},
	{"idiv", "push r,rax\npush r,rbx\npush d,1\nor\nidiv\nlog 2\npush d,-7\npush d,2\nidiv\nlog 2\npush d,0x8000000000000000\npush d,-1\nidiv\nlog 2\npush d,5\npush d,-1\nidiv\nlog 2\nexit 1"},
	{"idiv by zero", "push d,5\npush d,0\nidiv\nexit 1"},
	{"shifts imm", "push r,rax\nshl 3\npush r,rax\nshr 63\npush r,rax\nsar 7\npush r,rax\nrol 13\npush r,rax\nror 1\npush r,rbx\nshl 0\nlog 6\nexit 1"},
	{"shifts", "push r,rax\npush d,3\nshl\npush r,rax\npush d,64\nshl\npush r,rax\npush d,65\nshr\npush r,rax\npush d,5\nshr\npush d,-8\npush d,100\nsar\npush d,-8\npush d,2\nsar\npush r,rax\npush d,68\nrol\npush r,rax\npush d,3\nror\nlog 8\nexit 1"},
	{"shifts by a register", "push r,rax\npush r,rcx\nshl\npush r,rax\npush r,rcx\nshr\npush r,rax\npush r,rcx\nsar\npush r,rax\npush r,rcx\nrol\npush r,rax\npush r,rcx\nror\nlog 5\nexit 1"},
	{"stack ops", "push d,1\npush d,2\npush d,3\nxchg\ndup\npop\npush d,4\nros 2\nlog 2\nexit 1"},
	{"stack wraps", strings.Repeat("push d,5\n", 35) + "log 32\n" + strings.Repeat("pop\n", 31) + "log 3\nexit 1"},
	{"reads the zeroed stack", "log 4\npop\npop\nlog 3\nexit 1"},
	{"jumps", "push d,3\nagain: push d,1\nsub\njnz again\npush d,7\njz no\njnz yes\nno: exit 0\nyes: push d,-1\njlt a\nexit 0\na: jle b\nexit 0\nb: push d,1\njgt c\nexit 0\nc: jge d\nexit 0\nd: jmp e\ne: log 3\nexit 1"},
	{"loop", "push d,5\nl: push lp\nlog 1\nloop l\nlog 1\nexit 1"},
	{"loop from zero wraps", "jmpmax = 10\npush d,0\nl: loop l\nexit 1"},
	{"max jumps", "jmpmax = 5\nl: jmp l"},
	{"max jumps on a conditional", "jmpmax = 2\npush d,1\nl: jnz l\nexit 1"},
	{"call ret", "push d,1\ncall f\ncall f\nlog 1\nexit 1\nf: push d,2\nadd\nret"},
	{"recursion too deep", "f: call f\nexit 1"},
	{"ret at depth 0", "push d,1\nret"},
	{"call in a loop", "push d,3\nl: call f\nloop l\nlog 2\nexit 1\nf: push lp\nxchg\nret"},
	{"log n truncates", "logmax = 20\npush d,0x1122334455667788\npush d,2\npush d,3\nlog 3\nexit 1"},
	{"log n after a full log", "logmax = 8\npush d,1\nlog 1\npush d,2\nlog 1\nexit 1"},
	{"log n exactly full", "logmax = 16\npush d,1\npush d,2\nlog 2\nexit 1"},
	{"push lp pop lp", "push d,1\npush d,2\nlog 2\npush lp\npush d,8\npop lp\nlog 1\nexit 1"},
	{"pop lp beyond", "push d,8\npop lp\nexit 1"},
	{"setmaj setmin", "major = 3\nminor = 4\nsetmaj 10\nsetmin 11\nexit 1"},
	{"setmaj from the stack", "push d,0xffff\nsetmaj\npush d,7\nsetmin\nexit 1"},
	{"setmaj too big", "push d,0x10000\nsetmaj\nexit 1"},
	{"variables", "vars = 4\ngvars = 3\ninc lv,0\ndec lv,1\npush lv,2\npush d,9\npop lv,3\npush gv,0\npush d,5\nmove gv,1\ninc gv,2\ndec gv,0\nlog 3\nlog lv,0,4\nlog gv,0,3\nexit 1"},
	{"indexed variables", "vars = 4\ngvars = 2\npush d,2\npush lv\npush d,1\npush d,77\npop lv\npush d,66\npush d,3\nmove lv\npush d,0\ninc lv\npush d,1\ndec lv\npush d,1\npush gv\npush d,0\ninc gv\nlog 3\nlog lv,0,4\nexit 1"},
	{"indexed variable out of range", "vars = 2\npush d,2\npush lv\nexit 1"},
	{"indexed gv out of range", "gvars = 2\npush d,7\npush d,2\npop gv\nexit 1"},
	{"log lv large", "vars = 200\nlogmax = 4000\nlog lv,0,200\nlog lv,10,9\nexit 1"},
	{"log lv truncated", "vars = 20\nlogmax = 100\nlog lv,0,20\nexit 1"},
	{"log lv into a full log", "vars = 2\nlogmax = 8\npush d,1\nlog 1\nlog lv,0,2\nexit 1"},
	{"pid tid", "push pid\npush tid\npush pid\nlog 3\nexit 1"},
	{"ts", "push ts\npush ts\nlog 2\nexit 1"},
	{"procid not found", "push procid\nlog 1\nexit 1"},
	{"io", "push d,0x80\npush io,1\nexit 1"},
	{"pop io", "push d,0x80\npush d,1\npop io,1\nexit 1"},
	{"nop", "nop\nnop\nexit 1"},
	{"enable disable", "minor = 7\nenable 8\ndisable 9\nenable 65535\ndisable 0\nexit 1\noffset = 0x2000\nminor = 8\nexit\noffset = 0x3000\nminor = 9\nexit\noffset = 0x4000\nminor = 65535\nexit\noffset = 0x5000\nminor = 0\nexit"},
	{"disable itself", "minor = 3\npush d,1\nlog 1\ndisable 3\nexit 1"},
	{"i386 arith", "arch = i386\npush d,0xffffffff\npush d,2\nadd\npush d,-1\npush r,eax\nmul\npush r,ecx\npush r,edx\nsub\nnot\nneg\nlog 4\nexit 1"},
	{"i386 jumps", "arch = i386\npush d,0x80000000\njlt neg\nexit 0\nneg: push d,0xffffffff\nlog 1\nexit 1"},
	{"i386 idiv sar", "arch = i386\npush d,-9\npush d,2\nidiv\npush d,0x80000000\nsar 4\nlog 3\npush d,0x80000000\npush d,-1\nidiv\nlog 2\nexit 1"},
	{"i386 shifts", "arch = i386\npush r,eax\nshl 31\npush r,eax\nshr 31\npush r,eax\nsar 31\npush r,eax\nrol 31\npush r,eax\nror 31\npush r,eax\npush d,33\nshl\npush r,eax\npush d,32\nshr\npush r,eax\npush d,100\nsar\npush r,eax\npush d,33\nrol\npush r,eax\npush d,35\nror\nlog 10\nexit 1"},
	{"i386 loop", "arch = i386\npush d,0\nl: loop l\nexit 1"},
	{"i386 variables", "arch = i386\nvars = 2\ngvars = 2\ninc lv,0\ndec lv,1\ninc gv,0\ndec gv,1\npush d,1\ninc lv\npush lv,0\npush lv,1\npush lv,0\npush lv,1\nand\nor\nlog 2\nlog lv,0,2\nlog gv,0,2\nexit 1"},
	{"i386 registers", "arch = i386\npush r,eax\npush r,esp\npush r,eip\npush r,cs\npush d,5\npop r,ebx\nlog 4\nexit 1"},
	{"kernel: push task and cr", "modtype = kernel\npush task\nexit 1"},
	{"kernel: cr0", "modtype = kernel\npush r,cr3\nexit 1"},
	{"kernel: push u", "modtype = kernel\npush u,rdi\npush u,eax\nlog 2\nexit 1"},
	{"pass count", "passcount = 2\npush d,1\nlog 1\nexit 1"},
	{"max hits", "maxhits = 2\npush d,1\nlog 1\nexit 1"},
	{"pass count and max hits", "vars = 1\npasscount = 1\nmaxhits = 2\ninc lv,0\nexit 1"},
	{"exception counts toward max hits", "maxhits = 1\npush d,0\npush d,0\ndiv\nexit 1"},
	{"depth differs by path: dynamic stack", "push r,rax\njz a\npush d,1\na: push d,2\nlog 2\nexit 1"},
}

func TestTable(t *testing.T) {
	h := newHarness(t, 1)
	for _, c := range tableCases {
		t.Run(c.name, func(t *testing.T) {
			h.sub(t)
			p := compileSrc(t, c.src)
			runDiff(t, h, p, 5, func(s *hitSetup) {
				// some zero registers, for the conditional paths
				if h.rng.IntN(3) == 0 {
					s.frame[rpn.RegRAX] = 0
				}
			})
		})
	}
}

// procid: the thread table, with the test's thread in it, among others
// and tombstones on the way.
func TestProcID(t *testing.T) {
	h := newHarness(t, 2)
	p := compileSrc(t, "push procid\npush procid\nlog 2\nexit 1")
	r, err := h.start(p)
	if err != nil {
		t.Fatal(err)
	}
	if d := r.hit(h.randomSetup()); d != "" {
		t.Fatalf("no table entry: %s", d)
	}
	// others first, colliding with ours: the same first slot
	tid := uint32(h.tid)
	for other := uint32(1); other < 1<<22; other++ {
		if other != tid && other*0x9e3779b1>>(32-jit.ThreadBits) == tid*0x9e3779b1>>(32-jit.ThreadBits) {
			h.setThread(other, 5)
			break
		}
	}
	h.setThread(0xffffffff, 0) // a tombstone-like entry nobody matches
	h.setThread(tid, 42)
	for i := 0; i < 3; i++ {
		if d := r.hit(h.randomSetup()); d != "" {
			t.Fatalf("with the table: %s", d)
		}
	}
	n := uint64(len(r.ref.Mach.Run(p, 0, &rpn.ProbeState{}, r.ref.LV, r.ref.GV, &env{h: h}).Log))
	if n != 16 {
		t.Fatalf("log of %d bytes", n)
	}
}

// In a pid namespace of the process's own, push pid and push tid are the
// root ids of the thread's entry in the thread table (what gprobes
// reports elsewhere), not getpid's and gettid's; a thread not in the
// table is an invalid-operand exception, as for push procid.
func TestPidNamespace(t *testing.T) {
	h := newHarness(t, 4)
	h.pidns = true
	p := compileSrc(t, "push pid\npush tid\npush procid\nlog 3\nexit 1")
	r, err := h.start(p)
	if err != nil {
		t.Fatal(err)
	}
	if d := r.hit(h.randomSetup()); d != "" {
		t.Fatalf("no table entry: %s", d)
	}
	if res := r.ref.Mach.Run(p, 0, &rpn.ProbeState{}, r.ref.LV, r.ref.GV, &env{h: h}); res.Outcome != rpn.OutcomeException || res.Exception != rpn.ExInvalidOperand {
		t.Fatalf("no table entry: the machine says %+v", res)
	}
	h.setThreadIDs(uint32(h.tid), 7, 4000001, 4000002)
	for i := 0; i < 3; i++ {
		if d := r.hit(h.randomSetup()); d != "" {
			t.Fatalf("with the table: %s", d)
		}
	}
	res := r.ref.Mach.Run(p, 0, &rpn.ProbeState{}, r.ref.LV, r.ref.GV, &env{h: h})
	if len(res.Log) != 24 || binary.LittleEndian.Uint64(res.Log) != 4000002 || binary.LittleEndian.Uint64(res.Log[8:]) != 4000001 || binary.LittleEndian.Uint64(res.Log[16:]) != 7 {
		t.Fatalf("log % x, want pid 4000002, tid 4000001, procid 7", res.Log)
	}
}

// A full thread table without the thread ends the search too.
func TestProcIDFullTable(t *testing.T) {
	h := newHarness(t, 3)
	p := compileSrc(t, "push procid\nlog 1\nexit 1")
	r, err := h.start(p)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < jit.ThreadSlots; i++ {
		*h.u64(dThreads + i*jit.ThreadEntry) = 0xffffffff
	}
	if d := r.hit(h.randomSetup()); d != "" {
		t.Fatal(d)
	}
}

// push ts through the clock, with shifts beyond 64 too.
func TestTimestamp(t *testing.T) {
	h := newHarness(t, 4)
	p := compileSrc(t, "push ts\nlog 1\nexit 1")
	for _, k := range []jit.Clock{
		{TSC0: 100, NS0: 1e18, Mult: 1 << 32, Shift: 32},
		{TSC0: 0, NS0: 0, Mult: 0x5555555555, Shift: 40},
		{TSC0: 1 << 63, NS0: 7, Mult: ^uint64(0), Shift: 64},
		{TSC0: 5, NS0: 7, Mult: ^uint64(0), Shift: 100},
		{TSC0: 5, NS0: 7, Mult: 3, Shift: 0},
	} {
		r, err := h.start(p)
		if err != nil {
			t.Fatal(err)
		}
		*h.clock() = k
		for i := 0; i < 4; i++ {
			if d := r.hit(h.randomSetup()); d != "" {
				t.Fatalf("clock %+v: %s", k, d)
			}
		}
	}
}

// The hit's time stamp is read by push ts when the pad has not (OffTSC
// 0): rdtsc (each listed in Code.TSC with its system-call handler), or,
// with the NoTSC byte set (a process that traps rdtsc), the
// clock_gettime system call: the time in ns, pushed as it is, and kept in
// OffTSC with bit 63 set for the record.
func TestTimestampRead(t *testing.T) {
	h := newHarness(t, 5)
	p := compileSrc(t, "push ts\nlog 1\nexit 1")
	r, err := h.start(p)
	if err != nil {
		t.Fatal(err)
	}
	code, err := jit.Compile(p, 0, h.layout())
	if err != nil {
		t.Fatal(err)
	}
	if len(code.TSC) != 1 || code.Bytes[code.TSC[0].At] != 0x0f || code.Bytes[code.TSC[0].At+1] != 0x31 || int(code.TSC[0].Handler) >= len(code.Bytes) {
		t.Fatalf("rdtsc sites %+v", code.TSC)
	}
	*h.clock() = jit.Clock{Mult: 1, Shift: 0}
	for _, notsc := range []byte{0, 1} {
		h.data[dNoTSC] = notsc
		*h.u64(dScratch + jit.OffTSC) = 0
		*h.u64(dScratch + jit.OffPid) = 0
		*h.u64(dScratch + jit.OffTid) = 0
		before := time.Now()
		if ret := r.x.Call(uintptr(h.addr(dFrame)), uintptr(h.addr(dScratch))); ret != jit.ResultCommit {
			t.Fatalf("returned %d", ret)
		}
		after := time.Now()
		stamp := *h.u64(dScratch + jit.OffTSC)
		logged := *h.u64(dScratch + jit.OffLog)
		if notsc == 0 {
			// the identity clock: push ts is the counter itself
			if stamp == 0 || stamp&jit.StampNS != 0 || logged != stamp {
				t.Errorf("rdtsc: stamp %#x, pushed %#x", stamp, logged)
			}
			continue
		}
		if stamp&jit.StampNS == 0 || logged != stamp&^jit.StampNS {
			t.Fatalf("system call: stamp %#x, pushed %#x", stamp, logged)
		}
		if ts := time.Unix(0, int64(logged)); ts.Before(before) || ts.After(after) {
			t.Errorf("system call: %v, not between %v and %v", ts, before, after)
		}
	}
}

// Compile refuses what the pad cannot run.
func TestUnsupported(t *testing.T) {
	for _, c := range []struct{ src, reason string }{
		{"exit 3", "exit 3: needs the tracer"},
		{"exit 4", "exit 4: needs the tracer"},
		{"push d,1\njz a\nexit 1\na: exit 3", "exit 3: needs the tracer"},
		{"push d,1\npop r,rip\nexit 1", "pop r rip"},
		{"push d,1\npop r,rsp\nexit 1", "pop r rsp"},
		{"push d,1\npop r,esp\nexit 1", "pop r esp"},
		{"push d,1\npop r,fs_base\nexit 1", "pop r fs_base"},
		{"push d,1\npop r,gs_base\nexit 1", "pop r gs_base"},
		{"modtype = kernel\npush d,1\npop u,rax\nexit 1", "pop u"},
		{"minor = 1\nenable 1\nexit 1", "enable: no switches in this layout"},
		{"minor = 1\ndisable 1\nexit 1", "disable: no switches in this layout"},
	} {
		p := compileSrc(t, c.src)
		_, err := jit.Compile(p, 0, jit.Layout{})
		var u *jit.Unsupported
		if !errors.As(err, &u) || !strings.HasPrefix(u.Reason, c.reason) {
			t.Errorf("%q: %v, want Unsupported %q", c.src, err, c.reason)
		}
	}
	p := compileSrc(t, "exit 1")
	if _, err := jit.Compile(p, 1, jit.Layout{}); err == nil {
		t.Error("probe 1 of a one-probe program compiled")
	}
	// push field: a tracepoint probe's, for the kernel target only
	f, err := dpdf.ParseSource("tp", []byte("name = vmlinux\nmodtype = kernel\ntracepoint = sched:sched_switch\npush field,prev_pid\nlog 1\nexit 1\n"), dpdf.Options{NoPreprocessor: true})
	if err != nil {
		t.Fatal(err)
	}
	if p, err = compiler.CompileProgram(f, rpn.CompileOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = jit.Compile(p, 0, jit.Layout{})
	var u *jit.Unsupported
	if !errors.As(err, &u) || u.Reason != "push field: tracepoint probes run on --target kernel only" {
		t.Errorf("push field: %v", err)
	}
}

// The semantics table of the machine (rpn/testdata/vm.txt): every case
// that compiles runs on both sides, with its registers, variables and
// hits. Its memory is at addresses the test process does not map, so
// those cases fault on both sides; system values are the process's own.
func TestVMCases(t *testing.T) {
	f, err := os.Open("../rpn/testdata/vm.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type vmCase struct {
		name     string
		src, env []string
		err      bool
	}
	var cases []*vmCase
	var cur *vmCase
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "=== "):
			cur = &vmCase{name: l[4:]}
			cases = append(cases, cur)
			section = "src"
		case cur == nil:
		case l == "--- env":
			section = "env"
		case l == "--- want":
			section = "want"
		case strings.HasPrefix(l, "#") && section != "src":
		default:
			switch section {
			case "src":
				cur.src = append(cur.src, l)
			case "env":
				cur.env = append(cur.env, l)
			case "want":
				cur.err = cur.err || strings.HasPrefix(l, "error ")
			}
		}
	}
	h := newHarness(t, 5)
	ran, refused := 0, map[string]string{}
	for _, c := range cases {
		if c.err {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			h.sub(t)
			hits, probe := 1, 0
			var regs []string
			lv, gv := map[int]uint64{}, map[int]uint64{}
			for _, l := range c.env {
				fl := strings.Fields(l)
				switch fl[0] {
				case "reg":
					regs = fl[1:]
				case "hits":
					fmt.Sscan(fl[1], &hits)
				case "probe":
					fmt.Sscan(fl[1], &probe)
				case "lv", "gv":
					for _, a := range fl[1:] {
						k, v, _ := strings.Cut(a, "=")
						var i int
						fmt.Sscan(k, &i)
						x, _ := dpdf.ParseNumber(strings.TrimPrefix(v, "-"))
						if strings.HasPrefix(v, "-") {
							x = -x
						}
						if fl[0] == "lv" {
							lv[i] = x
						} else {
							gv[i] = x
						}
					}
				}
			}
			p := compileSrc(t, strings.Join(c.src, "\n"))
			r, err := h.startProbe(p, probe)
			var u *jit.Unsupported
			if errors.As(err, &u) {
				refused[c.name] = u.Reason
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for i, v := range lv {
				r.ref.LV[i], *h.u64(dLV + i*8) = v, v
			}
			for i, v := range gv {
				r.ref.GV[i], *h.u64(dGV + i*8) = v, v
			}
			for i := 0; i < hits; i++ {
				s := h.randomSetup()
				for _, a := range regs {
					k, v, _ := strings.Cut(a, "=")
					reg, ok := rpn.LookupReg(rpn.ArchX86_64, k)
					x, _ := dpdf.ParseNumber(v)
					if ok && reg.Canonical() <= rpn.RegRFLAGS {
						s.frame[reg.Canonical()] = x
					}
				}
				if d := r.hit(s); d != "" {
					t.Fatalf("hit %d: %s\n%s", i+1, d, p.Listing(probe))
				}
			}
			ran++
		})
	}
	// what the jump route refuses, by name: the rest must run
	const ivs = "push iv/pop iv: instance variables are the int3 route's"
	want := map[string]string{
		"exit 3 commits the log (the dump is the engine's)":                 "exit 3: needs the tracer",
		"exit 4 commits the log (the debugger hand-off is the engine's)":    "exit 4: needs the tracer",
		"push iv and pop iv read and write the call's instance variables":   ivs,
		"the simulator's hits are of one call: its instance variables stay": ivs,
		"an instance variable is a word: 32 bits on i386":                   ivs,
	}
	if !maps.Equal(refused, want) {
		t.Errorf("refused %d cases:\n%s\nwant %d:\n%s", len(refused), listCases(refused), len(want), listCases(want))
	}
	total := 0
	for _, c := range cases {
		if !c.err {
			total++
		}
	}
	if ran != total-len(want) {
		t.Errorf("%d of %d cases ran, %d refused as expected; want %d", ran, total, len(want), total-len(want))
	}
}

func listCases(m map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(&b, "  %s: %s\n", k, m[k])
	}
	return b.String()
}

// A probe switched off (its minor's byte in Layout.Switch not 0) is no
// hit: the code returns at once and counts nothing, and counts again
// once it is on; enable and disable store to the bytes of their minors.
func TestSwitchOff(t *testing.T) {
	h := newHarness(t, 5)
	p := compileSrc(t, "minor = 300\npass count = 1\npush d,1\nlog 1\nexit 1")
	r, err := h.start(p)
	if err != nil {
		t.Fatal(err)
	}
	h.sw[300], h.swShadow[300] = 1, 1
	for i := 0; i < 3; i++ {
		if d := r.hit(h.randomSetup()); d != "" {
			t.Fatal(d)
		}
	}
	if c := *h.counters(); c != (jit.Counters{}) {
		t.Fatalf("switched off, counted %+v", c)
	}
	h.sw[300], h.swShadow[300] = 0, 0
	for i := 0; i < 3; i++ {
		if d := r.hit(h.randomSetup()); d != "" {
			t.Fatal(d)
		}
	}
	if c := *h.counters(); c.Hits != 3 || c.Skipped != 1 || c.Runs != 2 {
		t.Fatalf("switched on: %+v", c)
	}
}
