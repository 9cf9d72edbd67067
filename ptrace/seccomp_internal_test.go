package ptrace

import "testing"

// The classic BPF interpreter of seccomp filters: the filters libseccomp,
// systemd and Docker generate are jumps on nr and arch, argument checks
// (64-bit values compared in halves) and returns; each result below is
// worked out by hand from the program.
func TestSeccompFilter(t *testing.T) {
	const (
		ldNr   = 0x20
		jeq    = 0x15
		jgt    = 0x25
		jge    = 0x35
		jset   = 0x45
		ret    = 0x06
		retA   = 0x16
		ldImm  = 0x00
		ldxImm = 0x01
		addX   = 0x0c
		and    = 0x54
		tax    = 0x07
		txa    = 0x87
		st     = 0x02
		ldMem  = 0x60
		divX   = 0x3c
		ja     = 0x05
		ldLen  = 0x80
	)
	arch := func(ok, bad uint8) []bpfInsn {
		return []bpfInsn{{Code: ldNr, K: 4}, {Code: jeq, Jt: ok, Jf: bad, K: auditArchX86_64}}
	}
	// kill mmap if arch is x86-64, allow the rest; an unknown arch is
	// killed
	killMmap := append(arch(0, 2),
		bpfInsn{Code: ldNr, K: 0},
		bpfInsn{Code: jeq, Jt: 0, Jf: 1, K: 9},
		bpfInsn{Code: ret, K: secKillProcess},
		bpfInsn{Code: ret, K: secAllow},
	)
	// mmap with PROT_EXEC (arg 2, low half, bit 2) gets EPERM
	noExec := []bpfInsn{
		{Code: ldNr, K: 0},
		{Code: jeq, Jt: 0, Jf: 3, K: 9},
		{Code: ldNr, K: 16 + 2*8},
		{Code: jset, Jt: 0, Jf: 1, K: 4},
		{Code: ret, K: secErrno | 1},
		{Code: ret, K: secAllow},
	}
	// arithmetic, scratch memory, X, unconditional jumps and len:
	// A = nr + 100; M[3] = A; X = 2; A = M[3] / X; return ALLOW if A
	// >= 54 (nr >= 8) else LOG, via ja
	arith := []bpfInsn{
		{Code: ldNr, K: 0},
		{Code: ldxImm, K: 100},
		{Code: addX},
		{Code: st, K: 3},
		{Code: ldxImm, K: 2},
		{Code: ldMem, K: 3},
		{Code: divX},
		{Code: jge, Jt: 1, Jf: 0, K: 54},
		{Code: ja, K: 1},
		{Code: ret, K: secAllow},
		{Code: ldLen},
		{Code: jgt, Jt: 0, Jf: 1, K: 63},
		{Code: ret, K: secLog},
		{Code: ret, K: secKillThread},
	}
	divZero := []bpfInsn{{Code: ldImm, K: 7}, {Code: ldxImm, K: 0}, {Code: divX}, {Code: ret, K: secAllow}}
	retFromA := []bpfInsn{{Code: ldImm, K: secTrap | 5}, {Code: tax}, {Code: ldImm}, {Code: txa}, {Code: and, K: 0xffff0000}, {Code: retA}}
	for _, c := range []struct {
		name    string
		filters [][]bpfInsn
		nr      int32
		arch    uint32
		args    []uint64
		want    uint32
	}{
		{"mmap killed", [][]bpfInsn{killMmap}, 9, auditArchX86_64, nil, secKillProcess},
		{"openat allowed", [][]bpfInsn{killMmap}, 257, auditArchX86_64, nil, secAllow},
		{"another arch killed", [][]bpfInsn{killMmap}, 257, 0x40000003, nil, secKillProcess},
		{"mmap exec refused", [][]bpfInsn{noExec}, 9, auditArchX86_64, []uint64{0, 4096, 5}, secErrno | 1},
		{"mmap rw allowed", [][]bpfInsn{noExec}, 9, auditArchX86_64, []uint64{0, 4096, 3}, secAllow},
		{"precedence: kill beats errno", [][]bpfInsn{noExec, killMmap}, 9, auditArchX86_64, []uint64{0, 4096, 5}, secKillProcess},
		{"precedence: errno beats allow", [][]bpfInsn{killMmap, {{Code: ret, K: secErrno | 2}}}, 257, auditArchX86_64, nil, secErrno | 2},
		{"precedence: an unknown action kills", [][]bpfInsn{{{Code: ret, K: 0x12340000}}}, 257, auditArchX86_64, nil, secKillProcess},
		{"arith nr 9", [][]bpfInsn{arith}, 9, auditArchX86_64, nil, secAllow},
		{"arith nr 3", [][]bpfInsn{arith}, 3, auditArchX86_64, nil, secLog},
		{"division by zero returns 0", [][]bpfInsn{divZero}, 3, auditArchX86_64, nil, secKillThread},
		{"ret A through X", [][]bpfInsn{retFromA}, 3, auditArchX86_64, nil, secTrap},
		{"no filter", nil, 9, auditArchX86_64, nil, secAllow},
	} {
		d := seccompData{Nr: c.nr, Arch: c.arch}
		copy(d.Args[:], c.args)
		got, err := seccompVerdict(c.filters, &d)
		if err != nil || got != c.want {
			t.Errorf("%s: %#x (%s) %v, want %#x (%s)", c.name, got, seccompAction(got), err, c.want, seccompAction(c.want))
		}
	}
	// programs the kernel would not have loaded are errors, not verdicts
	for _, bad := range [][]bpfInsn{
		{{Code: ldNr, K: 2}, {Code: ret, K: secAllow}},  // unaligned
		{{Code: ldNr, K: 64}, {Code: ret, K: secAllow}}, // past seccomp_data
		{{Code: 0x28, K: 0}, {Code: ret, K: secAllow}},  // a 16-bit load
		{{Code: ldImm, K: 1}},                           // no return
		{{Code: ldMem, K: 16}, {Code: ret, K: secAllow}},
	} {
		if r, err := runFilter(bad, &seccompData{}); err == nil {
			t.Errorf("%+v: %#x, want an error", bad, r)
		}
	}
}
