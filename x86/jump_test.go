package x86

import (
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/internal/testkit"
)

const jumpFn = 0x401000 // where every function of jumpTable starts

// Hand-assembled functions (AT&T in the comments, offsets from jumpFn) and
// what PlanJump must decide for a probe at jumpFn+off.
var jumpTable = []struct {
	name    string
	mode    int
	code    []byte
	off     int
	covered []string // String() of the covered instructions; nil: not checked
	reason  string   // "" accepted; else a substring of Reason
}{
	{
		name: "5-byte first instruction, covered alone",
		mode: 64,
		code: []byte{
			0xb8, 0x01, 0x00, 0x00, 0x00, // 0: mov $0x1,%eax
			0xc3, // 5: ret
		},
		covered: []string{"mov $0x1,%eax"},
	},
	{
		name: "push + mov cover two",
		mode: 64,
		code: []byte{
			0x53,                   // 0: push %rbx
			0x48, 0x8b, 0x5f, 0x08, // 1: mov 0x8(%rdi),%rbx
			0x48, 0x89, 0xd8, // 5: mov %rbx,%rax
			0x5b, // 8: pop %rbx
			0xc3, // 9: ret
		},
		covered: []string{"push %rbx", "mov 0x8(%rdi),%rbx"},
	},
	{
		name: "probe after the push: mov + mov",
		mode: 64,
		code: []byte{
			0x53,                   // 0: push %rbx
			0x48, 0x8b, 0x5f, 0x08, // 1: mov 0x8(%rdi),%rbx   <- probe
			0x48, 0x89, 0xd8, // 5: mov %rbx,%rax
			0x5b, // 8: pop %rbx
			0xc3, // 9: ret
		},
		off:     1,
		covered: []string{"mov 0x8(%rdi),%rbx", "mov %rbx,%rax"},
	},
	{
		name: "lock add to a RIP-relative global, alone (the pad rebases it)",
		mode: 64,
		code: []byte{
			0xf0, 0x48, 0x83, 0x05, 0xf0, 0x2f, 0x00, 0x00, 0x01, // 0: lock addq $0x1,0x2ff0(%rip)
			0xc3, // 9: ret
		},
		covered: []string{"lock addq $0x1,0x2ff0(%rip)"},
	},
	{
		name: "endbr64 + push",
		mode: 64,
		code: []byte{
			0xf3, 0x0f, 0x1e, 0xfa, // 0: endbr64
			0x55,             // 4: push %rbp
			0x48, 0x89, 0xe5, // 5: mov %rsp,%rbp
			0x5d, // 8: pop %rbp
			0xc3, // 9: ret
		},
		covered: []string{"endbr64", "push %rbp"},
	},
	{
		name: "endbr32 + push, 32-bit",
		mode: 32,
		code: []byte{
			0xf3, 0x0f, 0x1e, 0xfb, // 0: endbr32
			0x55,       // 4: push %ebp
			0x89, 0xe5, // 5: mov %esp,%ebp
			0x5d, // 7: pop %ebp
			0xc3, // 8: ret
		},
		covered: []string{"endbr32", "push %ebp"},
	},
	{
		name: "loop back-edge to the second covered instruction",
		mode: 64,
		code: []byte{
			0x31, 0xc0, // 0: xor %eax,%eax
			0x01, 0xf8, // 2: add %edi,%eax      <- loop top
			0xff, 0xcf, // 4: dec %edi
			0x75, 0xfa, // 6: jne 2
			0xc3, // 8: ret
		},
		covered: []string{"xor %eax,%eax", "add %edi,%eax", "dec %edi"},
		reason:  "a branch at 0x401006 lands inside the covered bytes (at 0x401002)",
	},
	{
		name: "loop instruction back-edge to the second covered instruction",
		mode: 64,
		code: []byte{
			0x31, 0xc0, // 0: xor %eax,%eax
			0x01, 0xf8, // 2: add %edi,%eax      <- loop top
			0xff, 0xc7, // 4: inc %edi
			0xe2, 0xfa, // 6: loop 2
			0xc3, // 8: ret
		},
		reason: "a branch at 0x401006 lands inside the covered bytes (at 0x401002)",
	},
	{
		name: "loop whose back-edge targets the probe itself",
		mode: 64,
		code: []byte{
			0x31, 0xc0, // 0: xor %eax,%eax
			0x01, 0xf8, // 2: add %edi,%eax      <- probe, loop top
			0xff, 0xcf, // 4: dec %edi
			0x75, 0xfa, // 6: jne 2             (last covered, lands on the jump)
			0xc3, // 8: ret
		},
		off:     2,
		covered: []string{"add %edi,%eax", "dec %edi", "jne 0x401002"},
	},
	{
		name: "a branch to the first byte after the covered ones",
		mode: 64,
		code: []byte{
			0x85, 0xff, // 0: test %edi,%edi
			0x74, 0x05, // 2: je 9
			0xb8, 0x01, 0x00, 0x00, 0x00, // 4: mov $0x1,%eax   <- probe
			0xc3, // 9: ret
		},
		off:     4,
		covered: []string{"mov $0x1,%eax"},
	},
	{
		name: "a branch into the middle of the covered instruction",
		mode: 64,
		code: []byte{
			0x85, 0xff, // 0: test %edi,%edi
			0x74, 0x04, // 2: je 8 (inside the mov: overlapping code)
			0xb8, 0x01, 0x00, 0x00, 0x00, // 4: mov $0x1,%eax   <- probe
			0xc3, // 9: ret
		},
		off:    4,
		reason: "a branch at 0x401002 lands inside the covered bytes (at 0x401008)",
	},
	{
		name: "xbegin's abort address inside the covered bytes",
		mode: 64,
		code: []byte{
			0xc7, 0xf8, 0x02, 0x00, 0x00, 0x00, // 0: xbegin 8
			0x31, 0xc0, // 6: xor %eax,%eax   <- probe
			0x31, 0xd2, // 8: xor %edx,%edx
			0xff, 0xc0, // a: inc %eax
			0xc3, // c: ret
		},
		off:    6,
		reason: "a branch at 0x401000 lands inside the covered bytes (at 0x401008)",
	},
	{
		name:   "a function that ends within 5 bytes",
		mode:   64,
		code:   []byte{0x31, 0xc0, 0xc3}, // xor %eax,%eax; ret
		reason: "the function ends 3 bytes after the probe",
	},
	{
		name: "a probe on the last instruction",
		mode: 64,
		code: []byte{
			0x55,             // 0: push %rbp
			0x48, 0x89, 0xe5, // 1: mov %rsp,%rbp
			0x5d,       // 4: pop %rbp
			0xc3,       // 5: ret     <- probe
			0x90, 0x90, // 6: nop; nop (2 bytes of padding in the symbol)
		},
		off:    5,
		reason: "the function ends 3 bytes after the probe",
	},
	{
		name: "jump table (non-PIC)",
		mode: 64,
		code: []byte{
			0x83, 0xff, 0x03, // 0: cmp $0x3,%edi
			0x77, 0x0f, // 3: ja 0x14
			0x89, 0xff, // 5: mov %edi,%edi
			0xff, 0x24, 0xfd, 0x00, 0x20, 0x40, 0x00, // 7: jmpq *0x402000(,%rdi,8)
			0xb8, 0x01, 0x00, 0x00, 0x00, // e: mov $0x1,%eax
			0xc3,       // 13: ret
			0x31, 0xc0, // 14: xor %eax,%eax
			0xc3, // 16: ret
		},
		covered: []string{"cmp $0x3,%edi", "ja 0x401014"},
		reason:  "an indirect jump in the function may land inside the covered bytes (`jmpq *0x402000(,%rdi,8)` at 0x401007)",
	},
	{
		name: "jump table (PIC, notrack jmp through a register)",
		mode: 64,
		code: []byte{
			0x83, 0xff, 0x03, // 0: cmp $0x3,%edi
			0x77, 0x11, // 3: ja 0x16
			0x48, 0x8d, 0x15, 0x00, 0x10, 0x00, 0x00, // 5: lea 0x1000(%rip),%rdx
			0x48, 0x63, 0x04, 0xba, // c: movslq (%rdx,%rdi,4),%rax
			0x48, 0x01, 0xd0, // 10: add %rdx,%rax
			0x3e, 0xff, 0xe0, // 13: notrack jmp *%rax
			0x31, 0xc0, // 16: xor %eax,%eax
			0xc3, // 18: ret
		},
		reason: "an indirect jump in the function may land inside",
	},
	{
		name: "tail call through the GOT: one fixed word, accepted",
		mode: 64,
		code: []byte{
			0x48, 0x89, 0xf7, // 0: mov %rsi,%rdi
			0x31, 0xf6, // 3: xor %esi,%esi
			0xff, 0x25, 0xf5, 0x2f, 0x00, 0x00, // 5: jmpq *0x2ff5(%rip)
		},
		covered: []string{"mov %rsi,%rdi", "xor %esi,%esi"},
	},
	{
		name: "call rel32 as the last covered instruction",
		mode: 64,
		code: []byte{
			0x53,                         // 0: push %rbx
			0xe8, 0xfa, 0x0f, 0x00, 0x00, // 1: call 0x402000
			0x5b, // 6: pop %rbx
			0xc3, // 7: ret
		},
		covered: []string{"push %rbx", "callq 0x402000"},
	},
	{
		// A call rel32 is 5 bytes: it always completes the jump, so it
		// can only be last. A 2-byte indirect call can be in the middle.
		name: "call *%rax in the middle",
		mode: 64,
		code: []byte{
			0xff, 0xd0, // 0: call *%rax
			0x48, 0x89, 0xc7, // 2: mov %rax,%rdi
			0xc3, // 5: ret
		},
		reason: "`call *%rax` at 0x401000 is a call in the middle of the covered bytes: its return address 0x401002 would be inside the jump",
	},
	{
		name: "jne in the middle",
		mode: 64,
		code: []byte{
			0x85, 0xff, // 0: test %edi,%edi
			0x75, 0x03, // 2: jne 7            <- probe
			0x31, 0xc0, // 4: xor %eax,%eax
			0xc3,                         // 6: ret
			0xb8, 0x01, 0x00, 0x00, 0x00, // 7: mov $0x1,%eax
			0xc3, // c: ret
		},
		off:    2,
		reason: "`jne 0x401007` at 0x401002 transfers control in the middle of the covered bytes",
	},
	{
		name: "ret in the middle",
		mode: 64,
		code: []byte{
			0x5b,                   // 0: pop %rbx
			0xc3,                   // 1: ret
			0x0f, 0x1f, 0x40, 0x00, // 2: nopl 0x0(%rax)
		},
		reason: "`retq` at 0x401001 transfers control in the middle",
	},
	{
		name: "ud2 covered",
		mode: 64,
		code: []byte{
			0x31, 0xc0, // 0: xor %eax,%eax
			0x0f, 0x0b, // 2: ud2
			0x90, 0x90, // 4: nop; nop
		},
		reason: "`ud2` at 0x401002 cannot run out of line",
	},
	{
		name: "eip-relative lea",
		mode: 64,
		code: []byte{
			0x67, 0x48, 0x8d, 0x05, 0x00, 0x10, 0x00, 0x00, // 0: lea 0x1000(%eip),%rax
			0xc3, // 8: ret
		},
		reason: "eip-relative operand",
	},
	{
		name: "not an instruction boundary",
		mode: 64,
		code: []byte{
			0x55,             // 0: push %rbp
			0x48, 0x89, 0xe5, // 1: mov %rsp,%rbp
			0x5d, 0xc3, // 4: pop %rbp; ret
		},
		off:    2,
		reason: "0x401002 is inside `mov %rsp,%rbp` at 0x401001",
	},
	{
		name:   "outside the function",
		mode:   64,
		code:   []byte{0x55, 0x48, 0x89, 0xe5, 0x5d, 0xc3},
		off:    6,
		reason: "0x401006 is outside the function [0x401000, 0x401006)",
	},
	{
		name: "the function does not decode to its end",
		mode: 64,
		code: []byte{
			0xb8, 0x01, 0x00, 0x00, 0x00, // 0: mov $0x1,%eax
			0xc3, // 5: ret
			0x06, // 6: push %es: invalid in 64-bit mode (data after the code)
		},
		reason: "the function does not decode to its end, so its branches are unknown: at 0x401006",
	},
	{
		name: "the function ends inside an instruction",
		mode: 64,
		code: []byte{
			0xb8, 0x01, 0x00, 0x00, 0x00, // 0: mov $0x1,%eax
			0x48, 0x89, // 5: mov ... (truncated)
		},
		reason: "truncated",
	},
	{
		name: "32-bit PIC thunk call, alone and last",
		mode: 32,
		code: []byte{
			0xe8, 0x00, 0x00, 0x00, 0x00, // 0: call 5 (lands right after the jump)
			0x5b, // 5: pop %ebx
			0xc3, // 6: ret
		},
		covered: []string{"call 0x401005"},
	},
	{
		name: "32-bit branch with an operand-size prefix",
		mode: 32,
		code: []byte{
			0xb8, 0x01, 0x00, 0x00, 0x00, // 0: mov $0x1,%eax
			0x66, 0x74, 0x00, // 5: je (16-bit ip)
			0xc3, // 8: ret
		},
		reason: "the branch at 0x401005 has an operand-size prefix",
	},
}

func TestPlanJump(t *testing.T) {
	for _, c := range jumpTable {
		t.Run(c.name, func(t *testing.T) {
			addr := uint64(jumpFn + c.off)
			p := PlanJump(c.code, jumpFn, addr, c.mode)
			switch {
			case c.reason == "" && p.Reason != "":
				t.Fatalf("refused: %s", p.Reason)
			case c.reason != "" && !strings.Contains(p.Reason, c.reason):
				t.Fatalf("reason %q, want it to contain %q", p.Reason, c.reason)
			case c.reason == "" && !p.OK():
				t.Fatalf("not OK with no reason: %+v", p)
			case c.reason != "" && p.OK():
				t.Fatalf("OK despite a reason")
			}
			if c.covered != nil {
				var got []string
				for i := range p.Covered {
					got = append(got, p.Covered[i].String())
				}
				if strings.Join(got, "; ") != strings.Join(c.covered, "; ") {
					t.Errorf("covered %q, want %q", got, c.covered)
				}
			}
			checkPlan(t, c.code, jumpFn, addr, c.mode, p)
		})
	}
}

// checkPlan checks what holds for every plan: the covered instructions are
// contiguous from addr and add up to Len; an accepted plan covers at least
// JumpLen bytes inside the function, at instruction boundaries, and no
// direct branch of the function lands inside.
func checkPlan(t *testing.T, fn []byte, fnAddr, addr uint64, mode int, p JumpPlan) {
	t.Helper()
	n, pc := 0, addr
	for i := range p.Covered {
		in := &p.Covered[i]
		if in.Addr != pc {
			t.Fatalf("covered instruction %d at %#x, want %#x", i, in.Addr, pc)
		}
		n += in.Len
		pc += uint64(in.Len)
	}
	if n != p.Len {
		t.Fatalf("covered lengths sum to %d, Len %d", n, p.Len)
	}
	if p.Reason != "" {
		return
	}
	if p.Len < JumpLen || len(p.Covered) == 0 {
		t.Fatalf("accepted with %d bytes covered", p.Len)
	}
	if addr+uint64(p.Len) > fnAddr+uint64(len(fn)) {
		t.Fatalf("covers %d bytes past the function's end", addr+uint64(p.Len)-fnAddr-uint64(len(fn)))
	}
	if err := CheckBoundary(fn, fnAddr, addr, mode); err != nil {
		t.Fatalf("accepted, but %v", err)
	}
	for i := range p.Covered {
		in := &p.Covered[i]
		if in.Class == Refuse || in.Class == Branch && i < len(p.Covered)-1 {
			t.Fatalf("accepted with `%s` (%v) covered at %d of %d", in.String(), in.Class, i, len(p.Covered))
		}
	}
	targets, err := BranchTargets(fn, fnAddr, mode)
	if err != nil {
		t.Fatalf("accepted, but BranchTargets: %v", err)
	}
	for _, to := range targets {
		if InsideCovered(p, addr, to) {
			t.Fatalf("accepted, but a branch lands at %#x", to)
		}
	}
}

// TestPlanJumpLibc plans a jump at the entry of every sized function of
// libc's .dynsym and at every instruction of those up to 512 bytes: every
// plan satisfies checkPlan, and no accepted plan covers the target of a
// Branch-class instruction as Decode and Insn.Target see it (a second path
// to the targets PlanJump finds with the structural decoder alone). The
// log shows why the others were refused (docs/x86.md quotes it).
func TestPlanJumpLibc(t *testing.T) {
	needAMD64(t)
	const libc = "/lib/x86_64-linux-gnu/libc.so.6"
	if _, err := os.Stat(libc); err != nil {
		testkit.SkipOrFail(t, "%s: %v", libc, err)
	}
	fns := functions(t, libc, true)
	if testing.Short() {
		fns = fns[:200]
	}
	addrs := regexp.MustCompile("0x[0-9a-f]+|`[^`]*`|[0-9]+ bytes")
	entry, every := map[string]int{}, map[string]int{}
	nEntry, nEvery := 0, 0
	for _, f := range fns {
		var targets []uint64
		var starts []uint64
		for pc := 0; pc < len(f.code); {
			in, err := Decode(f.code[pc:], f.start+uint64(pc), 64)
			if err != nil {
				break
			}
			if in.Class == Branch {
				targets = append(targets, in.Target())
			}
			starts = append(starts, in.Addr)
			pc += in.Len
		}
		for i, addr := range starts {
			if i > 0 && len(f.code) > 512 {
				break
			}
			p := PlanJump(f.code, f.start, addr, 64)
			checkPlan(t, f.code, f.start, addr, 64, p)
			if p.OK() {
				for _, to := range targets {
					if InsideCovered(p, addr, to) {
						t.Fatalf("%s: jump at %#x accepted, but a branch lands at %#x", f.name, addr, to)
					}
				}
			}
			why := addrs.ReplaceAllString(p.Reason, "X")
			if i == 0 {
				entry[why]++
				nEntry++
			}
			every[why]++
			nEvery++
		}
	}
	show := func(what string, m map[string]int, n int) {
		t.Logf("%s: %d", what, n)
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		sort.Slice(ks, func(i, j int) bool { return m[ks[i]] > m[ks[j]] || m[ks[i]] == m[ks[j]] && ks[i] < ks[j] })
		for _, k := range ks {
			label := k
			if k == "" {
				label = "(accepted)"
			}
			t.Logf("%7d %5.1f%%  %s", m[k], 100*float64(m[k])/float64(n), label)
		}
	}
	show("function entries", entry, nEntry)
	show("every instruction of functions up to 512 bytes", every, nEvery)
}

func TestCoveredRange(t *testing.T) {
	code := []byte{
		0xf3, 0x0f, 0x1e, 0xfa, // 0: endbr64
		0x41, 0x57, // 4: push %r15
		0xc3, // 6: ret
	}
	p := PlanJump(code, jumpFn, jumpFn, 64)
	if !p.OK() || p.Len != 6 {
		t.Fatalf("plan %+v", p)
	}
	lo, hi := CoveredRange(p, jumpFn)
	if lo != jumpFn+1 || hi != jumpFn+6 {
		t.Errorf("range [%#x, %#x), want [%#x, %#x)", lo, hi, jumpFn+1, jumpFn+6)
	}
	for pc, want := range map[uint64]bool{
		jumpFn - 1: false,
		jumpFn:     false, // a thread at the probe runs the jump
		jumpFn + 1: true,  // inside endbr64
		jumpFn + 4: true,  // at push %r15: would resume inside the rel32
		jumpFn + 5: true,
		jumpFn + 6: false, // the first byte after
	} {
		if got := InsideCovered(p, jumpFn, pc); got != want {
			t.Errorf("InsideCovered(%#x) = %v, want %v", pc, got, want)
		}
	}
	if lo, hi := CoveredRange(JumpPlan{}, jumpFn); lo != hi {
		t.Errorf("empty plan: range [%#x, %#x)", lo, hi)
	}
}

func TestBranchTargets(t *testing.T) {
	code := []byte{
		0x74, 0x02, // 0: je 4
		0x0f, 0x85, 0x10, 0x00, 0x00, 0x00, // 2: jne 0x18
		0xe8, 0xf3, 0x0f, 0x00, 0x00, // 8: call 0x402000
		0xe9, 0xe9, 0xef, 0xff, 0xff, // d: jmp 0x3ffffb
		0xe3, 0xfe, // 12: jrcxz 0x12
		0xff, 0xe0, // 14: jmp *%rax (not direct: no target)
		0xc3, // 16: ret
	}
	got, err := BranchTargets(code, jumpFn, 64)
	if err != nil {
		t.Fatal(err)
	}
	want := []uint64{0x401004, 0x401018, 0x402000, 0x3ffffb, 0x401012}
	if len(got) != len(want) {
		t.Fatalf("targets %#x, want %#x", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("target %d: %#x, want %#x", i, got[i], want[i])
		}
	}
	// 32-bit targets wrap at 4 GiB
	got, err = BranchTargets([]byte{0xeb, 0xfc}, 0, 32) // jmp -2 at 0: 0xfffffffe
	if err != nil || len(got) != 1 || got[0] != 0xfffffffe {
		t.Errorf("32-bit wrap: %#x, %v", got, err)
	}
	if _, err := BranchTargets([]byte{0x06}, jumpFn, 64); err == nil {
		t.Errorf("undecodable code: no error")
	}
}

// FuzzPlanJump: any bytes, any probe offset, any address: PlanJump never
// panics, and every plan satisfies checkPlan.
func FuzzPlanJump(f *testing.F) {
	for _, c := range jumpTable {
		f.Add(c.code, uint16(c.off), uint64(jumpFn), c.mode == 32)
	}
	f.Add([]byte{0xeb, 0xfe, 0x90, 0x90, 0x90, 0x90, 0x90}, uint16(2), uint64(1<<64-4), false)
	f.Add([]byte{0xe9, 0, 0, 0, 0, 0x90}, uint16(0), uint64(0xfffffffa), true)
	f.Fuzz(func(t *testing.T, fn []byte, off uint16, fnAddr uint64, m32 bool) {
		if len(fn) == 0 || len(fn) > 4096 {
			return
		}
		mode := 64
		if m32 {
			mode = 32
			fnAddr &= 0xffffffff
		}
		addr := fnAddr + uint64(int(off)%len(fn))
		p := PlanJump(fn, fnAddr, addr, mode)
		if p.Reason == "" && fnAddr+uint64(len(fn)) < fnAddr {
			t.Fatalf("accepted a function that wraps")
		}
		if fnAddr+uint64(len(fn)) >= fnAddr {
			checkPlan(t, fn, fnAddr, addr, mode, p)
		}
		_, _ = CoveredRange(p, addr)
		_, _ = BranchTargets(fn, fnAddr, mode)
	})
}
