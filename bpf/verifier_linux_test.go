//go:build linux

package bpf_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/bpf"
)

// Programs for every group of instructions (jit's table, less what eBPF
// refuses, plus loops and calls at the limits).
var groupCases = []struct{ name, src string }{
	{"push r log exit", "push r,rdi\npush r,rsi\nlog 2\nexit 1"},
	{"every general register", "push r,rax\npush r,rbx\npush r,rcx\npush r,rdx\npush r,rsi\npush r,rdi\npush r,rbp\npush r,rsp\nlog 8\npush r,r8\npush r,r9\npush r,r10\npush r,r11\npush r,r12\npush r,r13\npush r,r14\npush r,r15\npush r,rip\npush r,rflags\nlog 10\nexit 2"},
	{"32-bit views", "push r,eax\npush r,r9d\npush r,eip\npush r,eflags\npush r,esp\nlog 5\nexit 1"},
	{"segments", "push r,cs\npush r,ss\nlog 2\nexit 1"},
	{"push d", "push d,0\npush d,0x7fffffff\npush d,0x80000000\npush d,0xffffffff\npush d,-1\npush d,0x123456789abcdef0\nlog 6\nexit 1"},
	{"exit 0", "push d,1\nlog 1\nexit 0"},
	{"abort", "push d,1\nlog 1\nabort"},
	{"rem", "push d,1\nlog 1\nrem"},
	{"exit 2 empty log", "exit 2"},
	{"arith", "push u,rax\npush u,rbx\nadd\npush u,rcx\nsub\npush u,rdx\nmul\npush u,rsi\nand\npush u,rdi\nor\npush u,r8\nxor\nnot\nneg\nlog 1\nexit 1"},
	{"div", "push u,rax\npush u,rbx\npush d,1\nor\ndiv\nlog 2\npush d,-7\npush d,2\ndiv\nlog 2\nexit 1"},
	{"div by zero", "push d,5\npush d,0\ndiv\nexit 1"},
	{"idiv", "push u,rax\npush u,rbx\npush d,1\nor\nidiv\nlog 2\npush d,-7\npush d,2\nidiv\nlog 2\npush d,0x8000000000000000\npush d,-1\nidiv\nlog 2\npush d,5\npush d,-1\nidiv\nlog 2\nexit 1"},
	{"shifts imm", "push u,rax\nshl 3\npush u,rax\nshr 63\npush u,rax\nsar 7\npush u,rax\nrol 13\npush u,rax\nror 1\npush u,rbx\nshl 0\nlog 6\nexit 1"},
	{"shifts", "push u,rax\npush d,3\nshl\npush u,rax\npush d,64\nshl\npush u,rax\npush d,65\nshr\npush u,rax\npush d,5\nshr\npush d,-8\npush d,100\nsar\npush d,-8\npush d,2\nsar\npush u,rax\npush d,68\nrol\npush u,rax\npush d,3\nror\nlog 8\nexit 1"},
	{"shifts by a register", "push u,rax\npush u,rcx\nshl\npush u,rax\npush u,rcx\nshr\npush u,rax\npush u,rcx\nsar\npush u,rax\npush u,rcx\nrol\npush u,rax\npush u,rcx\nror\nlog 5\nexit 1"},
	{"stack ops", "push d,1\npush d,2\npush d,3\nxchg\ndup\npop\npush d,4\nros 2\nlog 2\nexit 1"},
	{"stack wraps", strings.Repeat("push d,5\n", 35) + "log 32\n" + strings.Repeat("pop\n", 31) + "log 3\nexit 1"},
	{"reads the zeroed stack", "log 4\npop\npop\nlog 3\nexit 1"},
	{"jumps", "push d,3\nagain: push d,1\nsub\njnz again\npush d,7\njz no\njnz yes\nno: exit 0\nyes: push d,-1\njlt a\nexit 0\na: jle b\nexit 0\nb: push d,1\njgt c\nexit 0\nc: jge d\nexit 0\nd: jmp e\ne: log 3\nexit 1"},
	{"forward jumps only", "push u,rdi\njz a\npush d,1\nlog 1\na: push u,rsi\njnz b\npush d,2\nlog 1\nb: exit 1"},
	{"forward jumps beyond jmpmax", "jmpmax = 1\npush u,rdi\njz a\npush d,1\nlog 1\na: push u,rsi\njnz b\npush d,2\nlog 1\nb: exit 1"},
	{"loop", "push d,5\nl: push lp\nlog 1\nloop l\nlog 1\nexit 1"},
	{"loop from zero wraps", "jmpmax = 10\npush d,0\nl: loop l\nexit 1"},
	{"loop to jmpmax 65535", "jmpmax = 65535\nvars = 1\npush d,65535\nl: inc lv,0\nloop l\nexit 0"},
	{"max jumps", "jmpmax = 5\nl: jmp l"},
	{"max jumps on a conditional", "jmpmax = 2\npush d,1\nl: jnz l\nexit 1"},
	{"call ret", "push d,1\ncall f\ncall f\nlog 1\nexit 1\nf: push d,2\nadd\nret"},
	{"recursion too deep", "f: call f\nexit 1"},
	{"ret at depth 0", "push d,1\nret"},
	{"call in a loop", "push d,3\nl: call f\nloop l\nlog 2\nexit 1\nf: push lp\nxchg\nret"},
	{"nested calls", "call a\nexit 1\na: call b\nret\nb: call c\nret\nc: push d,1\nlog 1\nret"},
	{"log n truncates", "logmax = 20\npush d,0x1122334455667788\npush d,2\npush d,3\nlog 3\nexit 1"},
	{"log n after a full log", "logmax = 8\npush d,1\nlog 1\npush d,2\nlog 1\nexit 1"},
	{"log 32", "logmax = 16\nlog 32\nexit 1"},
	{"push lp pop lp", "push d,1\npush d,2\nlog 2\npush lp\npush d,8\npop lp\nlog 1\nexit 1"},
	{"pop lp beyond", "push d,8\npop lp\nexit 1"},
	{"setmaj setmin", "major = 3\nminor = 4\nsetmaj 10\nsetmin 11\nexit 1"},
	{"setmaj from the stack", "push d,0xffff\nsetmaj\npush d,7\nsetmin\nexit 1"},
	{"variables", "vars = 4\ngvars = 3\ninc lv,0\ndec lv,1\npush lv,2\npush d,9\npop lv,3\npush gv,0\npush d,5\nmove gv,1\ninc gv,2\ndec gv,0\nlog 3\nlog lv,0,4\nlog gv,0,3\nexit 1"},
	{"indexed variables", "vars = 4\ngvars = 2\npush d,2\npush lv\npush d,1\npush d,77\npop lv\npush d,66\npush d,3\nmove lv\npush d,0\ninc lv\npush d,1\ndec lv\npush d,1\npush gv\npush d,0\ninc gv\nlog 3\nlog lv,0,4\nexit 1"},
	{"log lv large", "vars = 200\nlogmax = 4000\nlog lv,0,200\nlog lv,10,9\nexit 1"},
	{"log gv 256", "gvars = 256\nlogmax = 100\nlog gv,0,256\nexit 1"},
	{"pid tid procid task ts", "push pid\npush tid\npush procid\npush task\npush ts\nlog 5\nexit 1"},
	{"push u", "push u,rdi\npush u,eax\npush u,rip\npush u,rsp\npush u,cs\npush u,rflags\nlog 6\nexit 1"},
	{"push mrf", "push d,0\npush mrf,1\npush d,0xffffffff81000000\npush mrf,2\npush task\npush mrf,4\npush task\npush mrf\nlog 4\nexit 1"},
	{"log mrf", "push d,16\npush task\nlog mrf\npush d,100000\npush d,0x1000\nlog mrf\nexit 1"},
	{"log str", "push d,16\npush task\nlog str\npush d,-1\npush d,0x1000\nlog str\nexit 1"},
	{"vfy_r", "push task\nvfy_r\npush d,0\nvfy_r\nlog 2\nexit 1"},
	{"nop", "nop\nnop\nexit 1"},
	{"big logmax", "logmax = 65536\npush d,65536\npush task\nlog mrf\npush d,1\nlog 1\npush d,100\npush task\nlog str\nexit 1"},
	{"pass count", "passcount = 2\npush d,1\nlog 1\nexit 1"},
	{"max hits", "maxhits = 2\npush d,1\nlog 1\nexit 1"},
	{"pass count and max hits", "vars = 1\npasscount = 0x100000000\nmaxhits = 0x200000000\ninc lv,0\nexit 1"},
	{"depth differs by path: dynamic stack", "push u,rax\njz a\npush d,1\na: push d,2\nlog 2\nexit 1"},
	{"dynamic stack in a loop", "push d,3\nl: push d,1\nxchg\nloop l\nlog 4\nexit 1"},
	{"i386 arith", "arch = i386\npush d,0xffffffff\npush d,2\nadd\npush d,-1\npush u,eax\nmul\npush u,ecx\npush u,edx\nsub\nnot\nneg\nlog 4\nexit 1"},
	{"i386 jumps", "arch = i386\npush d,0x80000000\njlt neg\nexit 0\nneg: push d,0xffffffff\nlog 1\nexit 1"},
	{"i386 idiv sar", "arch = i386\npush d,-9\npush d,2\nidiv\npush d,0x80000000\nsar 4\nlog 3\npush d,0x80000000\npush d,-1\nidiv\nlog 2\nexit 1"},
	{"i386 shifts", "arch = i386\npush u,eax\nshl 31\npush u,eax\nshr 31\npush u,eax\nsar 31\npush u,eax\nrol 31\npush u,eax\nror 31\npush u,eax\npush d,33\nshl\npush u,eax\npush d,32\nshr\npush u,eax\npush d,100\nsar\npush u,eax\npush d,33\nrol\npush u,eax\npush d,35\nror\nlog 10\nexit 1"},
	{"i386 loop", "arch = i386\npush d,0\nl: loop l\nexit 1"},
	{"i386 variables", "arch = i386\nvars = 2\ngvars = 2\ninc lv,0\ndec lv,1\ninc gv,0\ndec gv,1\npush d,1\ninc lv\npush lv,0\npush lv,1\npush lv,0\npush lv,1\nand\nor\nlog 2\nlog lv,0,2\nlog gv,0,2\nexit 1"},
	{"i386 call", "arch = i386\npush d,1\ncall f\nlog 1\nexit 1\nf: push d,2\nadd\nret"},
}

// Every group compiles, and the kernel's verifier accepts it, for each
// kind of attachment it can run at (push r only where there are
// registers).
func TestVerifierAccepts(t *testing.T) {
	needBPF(t)
	for _, c := range groupCases {
		t.Run(c.name, func(t *testing.T) {
			p := compileSrc(t, c.src)
			kinds := []bpf.Kind{bpf.KindTracepoint, bpf.KindRawTracepoint, bpf.KindKprobe}
			if strings.Contains(c.src, "push r,") {
				kinds = []bpf.Kind{bpf.KindKprobe, bpf.KindUprobe}
			}
			for _, k := range kinds {
				t.Run(fmt.Sprint(k), func(t *testing.T) {
					_, _, cp := load(t, p, bpf.Options{Kind: k})
					t.Logf("%d eBPF instructions, loop mode %v", len(cp.Spec.Instructions), cp.Loop)
				})
			}
		})
	}
}

// What eBPF cannot do is refused at compile time with the instruction.
func TestUnsupported(t *testing.T) {
	for _, c := range []struct {
		src    string
		kind   bpf.Kind
		reason string
	}{
		{"push d,1\npush d,2\npop mrf\nexit 1", bpf.KindTracepoint, "pop mrf"},
		{"push d,1\npop r,rax\nexit 1", bpf.KindKprobe, "pop r"},
		{"push d,1\npop u,rax\nexit 1", bpf.KindTracepoint, "pop u"},
		{"push d,1\npush io,1\nexit 1", bpf.KindTracepoint, "push io"},
		{"push d,1\npush d,1\npop io,1\nexit 1", bpf.KindTracepoint, "pop io"},
		{"exit 3", bpf.KindTracepoint, "exit 3"},
		{"exit 4", bpf.KindTracepoint, "exit 4"},
		{"push d,1\nvfy_rw\nexit 1", bpf.KindTracepoint, "vfy_rw"},
		{"push r,rax\nexit 1", bpf.KindTracepoint, "push r,rax: a tracepoint has no probed instruction"},
		{"push r,rax\nexit 1", bpf.KindRawTracepoint, "push r,rax: a raw tracepoint"},
		{"push r,ds\nexit 1", bpf.KindKprobe, "push r,ds"},
		{"push r,cr3\nexit 1", bpf.KindKprobe, "push r,cr3"},
		{"push u,fs_base\nexit 1", bpf.KindTracepoint, "push u,fs_base"},
	} {
		p := compileSrc(t, c.src)
		_, err := bpf.Compile(p, 0, bpf.Options{Kind: c.kind})
		var u *bpf.Unsupported
		if !errors.As(err, &u) || !strings.Contains(err.Error(), c.reason) || !u.HasPC || !strings.Contains(u.Where, "test.dpdf:") {
			t.Errorf("%q on a %v: %v, want Unsupported %q at its line", c.src, c.kind, err, c.reason)
		} else {
			t.Logf("%v", err)
		}
	}
}
