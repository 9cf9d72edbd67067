package x86

import (
	"bufio"
	"debug/elf"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/internal/testkit"
)

// Real instruction bytes: every form found at function entries in
// Debian 12's libc.so.6, libstdc++ and gcc -O2 output (see the comments),
// and the instructions each class exists for.
var decodeTable = []struct {
	hex   string
	mode  int
	text  string // AT&T, as String prints it ("" to skip)
	class Class
	rip   int // RIPDispOff
}{
	// libc / gcc prologues
	{"f30f1efa", 64, "endbr64", Emulate, -1},
	{"f30f1efb", 32, "endbr32", Emulate, -1},
	{"55", 64, "push %rbp", Emulate, -1},
	{"53", 64, "push %rbx", Emulate, -1},
	{"4154", 64, "push %r12", Emulate, -1},
	{"4155", 64, "push %r13", Emulate, -1},
	{"4156", 64, "push %r14", Emulate, -1},
	{"4157", 64, "push %r15", Emulate, -1},
	{"50", 64, "push %rax", Emulate, -1},
	{"4889e5", 64, "mov %rsp,%rbp", Emulate, -1},
	{"4883ec08", 64, "sub $0x8,%rsp", Emulate, -1},
	{"4883ec18", 64, "sub $0x18,%rsp", Emulate, -1},
	{"4881ecd8000000", 64, "sub $0xd8,%rsp", Emulate, -1},
	{"4885ff", 64, "test %rdi,%rdi", Emulate, -1},
	{"85f6", 64, "test %esi,%esi", Emulate, -1},
	{"803f00", 64, "cmpb $0x0,(%rdi)", Emulate, -1},
	{"807f0200", 64, "cmpb $0x0,0x2(%rdi)", Emulate, -1},
	{"4189f2", 64, "mov %esi,%r10d", Emulate, -1},
	{"4989ca", 64, "mov %rcx,%r10", Emulate, -1},
	{"89fa", 64, "mov %edi,%edx", Emulate, -1},
	{"31c0", 64, "xor %eax,%eax", Emulate, -1},
	{"4531c0", 64, "xor %r8d,%r8d", Emulate, -1},
	{"4839d1", 64, "cmp %rdx,%rcx", Emulate, -1},
	{"83fe01", 64, "cmp $0x1,%esi", Emulate, -1},
	{"b816000000", 64, "mov $0x16,%eax", Emulate, -1},
	{"b8ffffffff", 64, "mov $-0x1,%eax", Emulate, -1}, // x86asm prints imm32 signed
	{"41b801000000", 64, "mov $0x1,%r8d", Emulate, -1},
	{"48c7c0ffffffff", 64, "mov $-0x1,%rax", Emulate, -1},
	{"8b07", 64, "mov (%rdi),%eax", Emulate, -1},
	{"488b4708", 64, "mov 0x8(%rdi),%rax", Emulate, -1},
	{"488b87a0000000", 64, "mov 0xa0(%rdi),%rax", Emulate, -1},
	{"0fbe07", 64, "movsbl (%rdi),%eax", Emulate, -1},
	{"0fb64708", 64, "movzbl 0x8(%rdi),%eax", Emulate, -1},
	{"4863c7", 64, "movsxd %edi,%rax", Emulate, -1},
	{"8d4eff", 64, "lea -0x1(%rsi),%ecx", Emulate, -1},
	{"488d0571000000", 64, "lea 0x71(%rip),%rax", Emulate, 3},
	{"488b05e1265700", 64, "mov 0x5726e1(%rip),%rax", Emulate, 3},
	{"c3", 64, "retq", Emulate, -1},
	{"f3c3", 64, "rep retq", Emulate, -1},
	{"90", 64, "nop", Emulate, -1},
	{"6690", 64, "data16 nop", Emulate, -1},
	{"0f1f00", 64, "nopl (%rax)", Emulate, -1},
	{"0f1f4000", 64, "nopl (%rax)", Emulate, -1},
	{"0f1f440000", 64, "nopl (%rax,%rax)", Emulate, -1},
	{"660f1f440000", 64, "nopw (%rax,%rax)", Emulate, -1},
	{"0f1f8000000000", 64, "nopl (%rax)", Emulate, -1},
	{"0f1f840000000000", 64, "nopl (%rax,%rax)", Emulate, -1},
	{"662e0f1f840000000000", 64, "nopw %cs:(%rax,%rax)", Emulate, -1},
	{"66662e0f1f840000000000", 64, "", Emulate, -1},
	{"f390", 64, "pause", Emulate, -1},
	{"ff25e22f0000", 64, "jmpq *0x2fe2(%rip)", Emulate, 2}, // PLT
	{"f2ff25e22f0000", 64, "bnd jmpq *0x2fe2(%rip)", Emulate, 3},
	{"ffd0", 64, "call *%rax", Emulate, -1},
	{"ff5008", 64, "callq *0x8(%rax)", Emulate, -1},
	{"c9", 64, "leaveq", Emulate, -1},
	{"9c", 64, "pushfq", Emulate, -1},
	{"6a00", 64, "pushq $0x0", Emulate, -1},
	{"0f94c0", 64, "sete %al", Emulate, -1},
	{"480f44c2", 64, "cmove %rdx,%rax", Emulate, -1},
	{"4898", 64, "cdqe", Emulate, -1},
	{"fc", 64, "cld", Emulate, -1},
	// boost: registers only, cannot fault
	{"c5f877", 64, "vzeroupper", Boost, -1},
	{"660fefc0", 64, "pxor %xmm0,%xmm0", Boost, -1},
	{"c5fdefc0", 64, "vpxor %ymm0,%ymm0,%ymm0", Boost, -1},
	{"0f28c1", 64, "movaps %xmm1,%xmm0", Boost, -1},
	{"66480f6ec7", 64, "movq %rdi,%xmm0", Boost, -1},
	{"62f1fd4828c1", 64, "vmovapd %zmm1,%zmm0", Boost, -1},
	{"480fc8", 64, "bswap %rax", Boost, -1},
	{"48d3e0", 64, "shl %cl,%rax", Boost, -1},
	{"48c1e803", 64, "shr $0x3,%rax", Boost, -1},
	{"480fafc1", 64, "imul %rcx,%rax", Boost, -1},
	{"f3480fbcc0", 64, "tzcnt %rax,%rax", Boost, -1},
	{"f30fb8c7", 64, "popcnt %edi,%eax", Boost, -1},
	{"c4e2f1f7c0", 64, "shlxq %rcx,%rax,%rax", Boost, -1},
	{"0f18c0", 64, "", Boost, -1}, // reserved-NOP space, register form
	// step: memory that may fault, fs/gs, locked, faulting arithmetic, syscalls
	{"64488b042528000000", 64, "mov %fs:0x28,%rax", Step, -1},
	{"64488b042510000000", 64, "mov %fs:0x10,%rax", Step, -1},
	{"48895424f8", 64, "mov %rdx,-0x8(%rsp)", Step, -1},
	{"0f294424e8", 64, "movaps %xmm0,-0x18(%rsp)", Step, -1},
	{"c70700000000", 64, "movl $0x0,(%rdi)", Step, -1},
	{"f30f6f06", 64, "movdqu (%rsi),%xmm0", Step, -1},
	{"f30f7e15485c1600", 64, "movq 0x165c48(%rip),%xmm2", Step, 4},
	{"c5fe6f0500020000", 64, "", Step, 4}, // vmovdqu 0x200(%rip),%ymm0
	{"db6c2418", 64, "fldt 0x18(%rsp)", Step, -1},
	{"f0480fb111", 64, "lock cmpxchg %rdx,(%rcx)", Step, -1},
	{"48f7f1", 64, "div %rcx", Step, -1},
	{"f20f58c1", 64, "addsd %xmm1,%xmm0", Step, -1},
	{"f3a4", 64, "", Step, -1}, // rep movsb
	{"9d", 64, "popfq", Step, -1},
	{"0fa2", 64, "cpuid", Step, -1},
	{"0f31", 64, "rdtsc", Step, -1},
	{"0f05", 64, "syscall", Step, -1},
	{"cd80", 32, "int $0x80", Step, -1},
	{"0f01ee", 64, "rdpkru", Step, -1},
	// branch: relative displacement
	{"7405", 64, "je 0x401007", Branch, -1},
	{"0f8400010000", 64, "je 0x401106", Branch, -1},
	{"ebfe", 64, "jmp 0x401000", Branch, -1},
	{"e91bffffff", 64, "jmpq 0x400f20", Branch, -1},
	{"e800000000", 64, "callq 0x401005", Branch, -1},
	{"e2fe", 64, "loop 0x401000", Branch, -1},
	{"e3fe", 64, "jrcxz 0x401000", Branch, -1},
	{"67e3fd", 64, "jecxz 0x401000", Branch, -1},
	// refuse
	{"cc", 64, "int3", Refuse, -1},
	{"cd03", 64, "int $0x3", Refuse, -1},
	{"cd80", 64, "", Step, -1}, // int $0x80 from 64-bit code: still a system call
	{"f1", 64, "", Refuse, -1},
	{"ce", 32, "into", Refuse, -1},
	{"48cf", 64, "", Refuse, -1}, // iretq
	{"f4", 64, "hlt", Refuse, -1},
	{"0f0b", 64, "ud2", Refuse, -1},
	{"0fb9c0", 64, "", Refuse, -1}, // ud1
	{"fa", 64, "cli", Refuse, -1},
	{"fb", 64, "sti", Refuse, -1},
	{"ec", 64, "", Refuse, -1},     // in (%dx),%al
	{"e660", 64, "", Refuse, -1},   // out %al,$0x60
	{"0f22d8", 64, "", Refuse, -1}, // mov %rax,%cr3
	{"0f30", 64, "wrmsr", Refuse, -1},
	{"0f01f8", 64, "swapgs", Refuse, -1},
	{"0f07", 64, "", Refuse, -1},   // sysret
	{"8ed0", 64, "", Refuse, -1},   // mov %eax,%ss
	{"ff1c24", 64, "", Refuse, -1}, // lcall *(%rsp)
	{"cb", 64, "lretq", Refuse, -1},
	{"c7f800000000", 64, "", Refuse, -1},    // xbegin
	{"67488b0500010000", 64, "", Refuse, 4}, // mov 0x100(%eip),%rax
	{"66c3", 64, "", Refuse, -1},            // retw: Intel and AMD disagree
	{"66ffd0", 64, "", Refuse, -1},          // callw *%ax
	{"0f0f", 64, "", Refuse, -1},            // 3DNow! (truncated too)
	// 32-bit
	{"55", 32, "push %ebp", Emulate, -1},
	{"89e5", 32, "mov %esp,%ebp", Emulate, -1},
	{"83ec1c", 32, "sub $0x1c,%esp", Emulate, -1},
	{"8b442404", 32, "mov 0x4(%esp),%eax", Emulate, -1},
	{"a100010010", 32, "mov 0x10000100,%eax", Emulate, -1},
	{"40", 32, "inc %eax", Emulate, -1},
	{"4f", 32, "dec %edi", Emulate, -1},
	{"e800000000", 32, "call 0x401005", Branch, -1},
	{"65a114000000", 32, "mov %gs:0x14,%eax", Step, -1},
	{"c5f877", 32, "vzeroupper", Boost, -1},
}

func TestDecodeClassify(t *testing.T) {
	for _, c := range decodeTable {
		b, err := hex.DecodeString(c.hex)
		if err != nil {
			t.Fatal(err)
		}
		in, err := Decode(b, 0x401000, c.mode)
		if c.hex == "0f0f" {
			if err == nil {
				t.Errorf("%s: truncated 3DNow! decoded", c.hex)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s (%d-bit): %v", c.hex, c.mode, err)
			continue
		}
		if in.Len != len(b) {
			t.Errorf("%s (%d-bit) `%s`: length %d, want %d", c.hex, c.mode, in.String(), in.Len, len(b))
		}
		if c.text != "" && in.String() != c.text {
			t.Errorf("%s (%d-bit): text %q, want %q", c.hex, c.mode, in.String(), c.text)
		}
		if in.Class != c.class {
			t.Errorf("%s (%d-bit) `%s`: class %v (%s), want %v", c.hex, c.mode, in.String(), in.Class, in.Why, c.class)
		}
		if in.Why == "" {
			t.Errorf("%s: no reason given", c.hex)
		}
		if in.RIPDispOff != c.rip {
			t.Errorf("%s `%s`: RIPDispOff %d, want %d", c.hex, in.String(), in.RIPDispOff, c.rip)
		}
	}
}

func TestDecodeKernel(t *testing.T) {
	for _, c := range []struct {
		hex       string
		user, krn Class
	}{
		{"fa", Refuse, Step},     // cli
		{"0f22d8", Refuse, Step}, // mov %rax,%cr3
		{"ec", Refuse, Step},     // in
		{"0f30", Refuse, Step},   // wrmsr
		{"0f01f8", Refuse, Refuse},
		{"0f05", Step, Refuse},
		{"f4", Refuse, Refuse},
	} {
		b, _ := hex.DecodeString(c.hex)
		u, _ := Decode(b, 0xffffffff81000000, 64)
		k, _ := DecodeKernel(b, 0xffffffff81000000, 64)
		if u.Class != c.user || k.Class != c.krn {
			t.Errorf("%s: user %v (%s), kernel %v (%s); want %v, %v", c.hex, u.Class, u.Why, k.Class, k.Why, c.user, c.krn)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, c := range []struct {
		hex       string
		mode      int
		truncated bool
	}{
		{"", 64, true},
		{"48", 64, true},
		{"488b", 64, true},
		{"488b80", 64, true},
		{"e8000000", 64, true},
		{"0f", 64, true},
		{"c5", 64, true},
		{"0f04", 64, false},     // undefined opcode
		{"06", 64, false},       // push %es: invalid in 64-bit mode
		{"66e90000", 64, false}, // jmpw: length differs between vendors
		{"f0c5f877", 64, false}, // lock before VEX
		{"6666666666666666666666666666666690", 64, false}, // longer than 15 bytes
	} {
		b, _ := hex.DecodeString(c.hex)
		in, err := Decode(b, 0x1000, c.mode)
		var de *DecodeError
		if !errors.As(err, &de) {
			t.Errorf("%q: error %v, want a DecodeError", c.hex, err)
			continue
		}
		if de.Truncated != c.truncated || in.Class != Refuse || !strings.Contains(err.Error(), "0x1000") {
			t.Errorf("%q: %v (truncated %v, class %v)", c.hex, err, de.Truncated, in.Class)
		}
	}
}

func TestLayoutPrefixes(t *testing.T) {
	for _, c := range []struct {
		hex  string
		mode int
		n    int
	}{
		{"c4c0", 32, 0},                  // les needs ModRM mod != 3: VEX in 32-bit mode, truncated
		{"c400", 32, 2},                  // les (%eax),%eax
		{"c500", 32, 2},                  // lds
		{"6200", 32, 2},                  // bound
		{"62f17c48100500000000", 64, 10}, // EVEX load rip-relative
		{"40c3", 64, 2},                  // REX then ret
		{"4066c3", 64, 3},                // REX cancelled by 66
		{"48b8efcdab8967452301", 64, 10},
		{"66b83412", 64, 4},
		{"a0efcdab8967452301", 64, 9}, // movabs
		{"67a078563412", 64, 6},       // addr32 moffs
		{"a078563412", 32, 5},
		{"67a03412", 32, 4},
		{"c8100001", 64, 4},     // enter
		{"f6c101", 64, 3},       // test $1,%cl
		{"f7c101000000", 64, 6}, // test $1,%ecx
		{"66f7c10100", 64, 5},
		{"f6d1", 64, 2},         // not %cl
		{"0f20d8", 64, 3},       // mov %cr3,%rax
		{"0f2387", 64, 3},       // mov to dr ignores mod
		{"660f7801aabb", 64, 6}, // extrq $imm,$imm
		{"0f0fc1b4", 64, 4},     // 3DNow! pfadd
		{"8fe8789ac1", 64, 5},   // XOP map 8 needs imm8: truncated form check below
		{"678b00", 32, 3},       // mov (%bx,%si),%eax
		{"678b4601", 32, 4},     // disp8 16-bit
		{"678b060000", 32, 5},   // disp16 absolute
	} {
		b, _ := hex.DecodeString(c.hex)
		l, err := parseLayout(b, c.mode)
		if c.n == 0 {
			if err == nil {
				t.Errorf("%s (%d-bit): decoded as %d bytes, want an error", c.hex, c.mode, l.len)
			}
			continue
		}
		if c.hex == "8fe8789ac1" {
			if err == nil {
				t.Errorf("%s: XOP map 8 without its imm8 decoded", c.hex)
			}
			continue
		}
		if err != nil || l.len != c.n {
			t.Errorf("%s (%d-bit): length %d, %v; want %d", c.hex, c.mode, l.len, err, c.n)
		}
	}
}

// objdumpStarts runs objdump -d on a file and returns the start address
// and length of every instruction in section sec, architecturally: objdump
// prints fwait+x87 pairs (9b d9 7c 24 fc "fstcw") as one instruction, they
// are two. Addresses in regions objdump could not decode are in bad.
func objdumpStarts(t *testing.T, file, sec string, mode int) (starts map[uint64]int, bad map[uint64]bool) {
	t.Helper()
	objdump := testkit.Tool(t, "objdump")
	args := []string{"-d", "--insn-width=16", "-j", sec, file}
	if mode == 32 {
		args = append([]string{"-M", "i386"}, args...)
	}
	out, err := exec.Command(objdump, args...).Output()
	if err != nil {
		t.Fatalf("objdump %v: %v", args, err)
	}
	starts, bad = map[uint64]int{}, map[uint64]bool{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) < 3 || !strings.HasSuffix(f[0], ":") {
			continue
		}
		a, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(f[0], ":")), 16, 64)
		if err != nil {
			continue
		}
		bytes := strings.Fields(f[1])
		mn := strings.TrimSpace(f[2])
		if strings.Contains(mn, "(bad)") || strings.HasPrefix(mn, ".byte") || strings.Contains(mn, "rex.") || strings.HasPrefix(mn, "rex") {
			bad[a] = true
			continue
		}
		if bytes[0] == "9b" && len(bytes) > 1 {
			starts[a] = 1
			starts[a+1] = len(bytes) - 1
			continue
		}
		starts[a] = len(bytes)
	}
	return starts, bad
}

type fn struct {
	name  string
	start uint64
	code  []byte
}

// functions returns the function symbols of an ELF file with their bytes.
func functions(t *testing.T, path string, dynamic bool) []fn {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var syms []elf.Symbol
	if dynamic {
		syms, err = f.DynamicSymbols()
	} else {
		syms, err = f.Symbols()
	}
	if err != nil {
		t.Fatal(err)
	}
	text := f.Section(".text")
	data, err := text.Data()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[uint64]bool{}
	var out []fn
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Size == 0 || seen[s.Value] || int(s.Section) >= len(f.Sections) || f.Sections[s.Section] != text {
			continue
		}
		seen[s.Value] = true
		lo := s.Value - text.Addr
		if lo+s.Size > uint64(len(data)) {
			continue
		}
		out = append(out, fn{s.Name, s.Value, data[lo : lo+s.Size]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].start < out[j].start })
	return out
}

// checkFunctions compares CheckBoundary with objdump on every byte of
// every function (or a sample of the bytes of large ones).
func checkFunctions(t *testing.T, fns []fn, starts map[uint64]int, bad map[uint64]bool, mode int, exhaustive int) {
	t.Helper()
	checked, insns, skipped := 0, 0, 0
	for _, f := range fns {
		// Decode linearly: our lengths must equal objdump's.
		ok := true
		for pc := 0; pc < len(f.code); {
			a := f.start + uint64(pc)
			if bad[a] {
				ok = false
				break
			}
			in, err := Decode(f.code[pc:], a, mode)
			want, known := starts[a]
			if !known {
				t.Errorf("%s: we decode an instruction at %#x that objdump does not", f.name, a)
				ok = false
				break
			}
			if err != nil {
				var de *DecodeError
				if errors.As(err, &de) && strings.Contains(de.Reason, "Intel and AMD") {
					ok = false // 66 e9: objdump assumes AMD
					break
				}
				t.Errorf("%s+%#x: %v (objdump: %d bytes)", f.name, pc, err, want)
				ok = false
				break
			}
			if in.Len != want {
				t.Errorf("%s+%#x `%s`: %d bytes, objdump says %d", f.name, pc, in.String(), in.Len, want)
			}
			pc += in.Len
			insns++
		}
		if !ok {
			skipped++
			continue
		}
		step := 1
		if len(f.code) > exhaustive {
			step = len(f.code)/exhaustive + 1
		}
		for off := 0; off < len(f.code); off += step {
			a := f.start + uint64(off)
			_, isStart := starts[a]
			err := CheckBoundary(f.code, f.start, a, mode)
			checked++
			if isStart != (err == nil) {
				t.Errorf("%s+%#x: CheckBoundary says %v, objdump says start=%v", f.name, off, err, isStart)
			}
			var be *BoundaryError
			if err != nil && (!errors.As(err, &be) || be.Insn == nil || be.Insn.Addr >= a || be.Insn.Addr+uint64(be.Insn.Len) <= a) {
				t.Errorf("%s+%#x: error %v does not name the containing instruction", f.name, off, err)
			}
		}
	}
	if len(fns) == 0 {
		t.Fatal("no functions")
	}
	t.Logf("%d functions, %d instructions, %d addresses checked, %d functions skipped (objdump could not decode them)", len(fns), insns, checked, skipped)
}

func TestCheckBoundaryGCC(t *testing.T) {
	needAMD64(t)
	gcc := testkit.Tool(t, "gcc")
	dir := t.TempDir()
	for _, c := range []struct {
		name  string
		mode  int
		flags []string
	}{
		{"O2-cet", 64, []string{"-O2", "-fcf-protection"}},
		{"O0", 64, []string{"-O0"}},
		{"O3-avx512", 64, []string{"-O3", "-mavx512f", "-mavx512vl", "-mbmi2", "-mpopcnt"}},
		{"Os-32", 32, []string{"-Os", "-m32", "-fcf-protection"}},
		{"O2-32-pic", 32, []string{"-O2", "-m32", "-fpic", "-msse2"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			obj := filepath.Join(dir, c.name+".o")
			args := append([]string{"-c", "-o", obj, filepath.Join("testdata", "boundary.c")}, c.flags...)
			if b, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
				t.Fatalf("gcc %v: %v\n%s", args, err, b)
			}
			starts, bad := objdumpStarts(t, obj, ".text", c.mode)
			checkFunctions(t, functions(t, obj, false), starts, bad, c.mode, 1<<20)
		})
	}
}

func TestCheckBoundaryLibc(t *testing.T) {
	needAMD64(t)
	const libc = "/lib/x86_64-linux-gnu/libc.so.6"
	if _, err := os.Stat(libc); err != nil {
		testkit.SkipOrFail(t, "%s: %v", libc, err)
	}
	starts, bad := objdumpStarts(t, libc, ".text", 64)
	fns := functions(t, libc, true)
	exhaustive := 1024
	if testing.Short() {
		fns, exhaustive = fns[:200], 256
	}
	checkFunctions(t, fns, starts, bad, 64, exhaustive)
}

func TestCheckBoundaryMessages(t *testing.T) {
	// push %rbp; mov 0x8(%rdi),%rax; ret
	code := []byte{0x55, 0x48, 0x8b, 0x47, 0x08, 0xc3}
	err := CheckBoundary(code, 0x1231, 0x1234, 64)
	if err == nil || !strings.Contains(err.Error(), "0x1234 is inside `mov 0x8(%rdi),%rax` at 0x1232 (4 bytes)") {
		t.Errorf("inside: %v", err)
	}
	if err := CheckBoundary(code, 0x1231, 0x1236, 64); err != nil {
		t.Errorf("ret: %v", err)
	}
	if err := CheckBoundary(code, 0x1231, 0x1240, 64); err == nil || !strings.Contains(err.Error(), "outside the function") {
		t.Errorf("outside: %v", err)
	}
	bad := []byte{0x55, 0x0f, 0x04, 0x90}
	if err := CheckBoundary(bad, 0x1000, 0x1003, 64); err == nil || !strings.Contains(err.Error(), "decoding failed at 0x1001") {
		t.Errorf("undecodable: %v", err)
	}
}
