//go:build linux && amd64

package jit_test

import (
	"fmt"
	"testing"

	"github.com/gprobes/gprobes/internal/jitexec"
	"golang.org/x/sys/unix"
)

// poke writes data at offset off of the memory region and its shadow,
// whatever the page's protection.
func (h *harness) poke(off int, data []byte) {
	if err := unix.Mprotect(h.mem, unix.PROT_READ|unix.PROT_WRITE); err != nil {
		h.t.Fatal(err)
	}
	copy(h.mem[off:], data)
	copy(h.shadow[off:], data)
	for p, prot := range memProt {
		if err := unix.Mprotect(h.mem[p*pageSize:(p+1)*pageSize], prot); err != nil {
			h.t.Fatal(err)
		}
	}
}

// Memory instructions against readable, read-only and unmapped pages,
// page-crossing accesses, strings that end, run on or fault. The faults
// are real: the compiled code's load or store faults, and the handler
// registered for it in Code.Fixups takes over, as with the tracer.
func TestMemory(t *testing.T) {
	h := newHarness(t, 6)
	// page 0, 1 rw; 2 r; 3 none; 4 rw; 5 none; 6 r; 7 none
	h.poke(0x100, []byte("hello\x00world"))
	h.poke(2*pageSize-3, []byte("abcdef\x00")) // rw into r
	h.poke(3*pageSize-4, []byte("wxyz"))       // r up to none, no NUL
	h.poke(3*pageSize-8, []byte("1234567\x00"))
	h.poke(5*pageSize-5, []byte("tail\x00")) // NUL is the last readable byte
	a := func(off int) string { return fmt.Sprintf("%#x", h.base+uint64(off)) }
	cases := []struct{ name, src string }{
		{"push mrf sizes", "push d," + a(0x100) + "\npush mrf,1\npush d," + a(0x101) + "\npush mrf,2\npush d," + a(0x103) + "\npush mrf,4\npush d," + a(0x107) + "\npush mrf,8\nlog 4\nexit 1"},
		{"push mrf read-only", "push d," + a(2*pageSize+8) + "\npush mrf,8\nlog 1\nexit 1"},
		{"push mrf unmapped", "push d," + a(3*pageSize+8) + "\npush mrf,4\nlog 1\nexit 1"},
		{"push mrf crossing into unmapped", "push d," + a(3*pageSize-2) + "\npush mrf,4\nlog 1\nexit 1"},
		{"push mrf crossing rw to r", "push d," + a(2*pageSize-4) + "\npush mrf,8\nlog 1\nexit 1"},
		{"pop mrf", "push d," + a(0x200) + "\npush d,0x1122334455667788\npop mrf,8\npush d," + a(0x300) + "\npush d,0xaabb\npop mrf,1\npush d," + a(0x301) + "\npush d,0xccdd\npop mrf,2\npush d," + a(0x303) + "\npush d,0x99887766\npop mrf,4\nexit 1"},
		{"pop mrf read-only", "push d," + a(2*pageSize+16) + "\npush d,1\npop mrf,1\nexit 1"},
		{"pop mrf unmapped", "push d," + a(5*pageSize+16) + "\npush d,1\npop mrf,4\nexit 1"},
		{"pop mrf crossing rw to r", "push d," + a(2*pageSize-4) + "\npush d,-1\npop mrf,8\nexit 1"},
		{"log str", "push d,100\npush d," + a(0x100) + "\nlog str\nexit 1"},
		{"log str limit", "push d,3\npush d," + a(0x100) + "\nlog str\nexit 1"},
		{"log str zero limit", "push d,0\npush d," + a(3*pageSize+1) + "\nlog str\nexit 1"},
		{"log str across rw to r", "push d,100\npush d," + a(2*pageSize-3) + "\nlog str\nexit 1"},
		{"log str into unmapped", "push d,100\npush d," + a(3*pageSize-4) + "\nlog str\nexit 1"},
		{"log str up to unmapped, limit stops", "push d,4\npush d," + a(3*pageSize-4) + "\nlog str\nexit 1"},
		{"log str NUL last readable", "push d,100\npush d," + a(5*pageSize-5) + "\nlog str\nexit 1"},
		{"log str unmapped start", "push d,100\npush d," + a(5*pageSize) + "\nlog str\nexit 1"},
		{"log str log full, next unreadable", "logmax = 4\npush d,100\npush d," + a(3*pageSize-4) + "\nlog str\nexit 1"},
		{"log str log full, next NUL", "logmax = 7\npush d,100\npush d," + a(3*pageSize-8) + "\nlog str\nexit 1"},
		{"log str log full, next not NUL", "logmax = 6\npush d,100\npush d," + a(3*pageSize-8) + "\nlog str\nexit 1"},
		{"log str log already full", "logmax = 8\npush d,1\nlog 1\npush d,100\npush d," + a(0x100) + "\nlog str\nexit 1"},
		{"log str log already full, unmapped", "logmax = 8\npush d,1\nlog 1\npush d,100\npush d," + a(7*pageSize) + "\nlog str\nexit 1"},
		{"log str twice", "push d,100\npush d," + a(0x100) + "\nlog str\npush d,100\npush d," + a(0x106) + "\nlog str\nexit 1"},
		{"log mrf", "push d,11\npush d," + a(0x100) + "\nlog mrf\nexit 1"},
		{"log mrf truncated", "logmax = 5\npush d,11\npush d," + a(0x100) + "\nlog mrf\nexit 1"},
		{"log mrf zero", "push d,0\npush d," + a(3*pageSize) + "\nlog mrf\nexit 1"},
		{"log mrf into unmapped", "push d,16\npush d," + a(3*pageSize-8) + "\nlog mrf\nexit 1"},
		{"log mrf unmapped, log full", "logmax = 8\npush d,1\nlog 1\npush d,16\npush d," + a(3*pageSize) + "\nlog mrf\nexit 1"},
		{"log mrf huge length", "logmax = 100\npush d,-1\npush d," + a(0x100) + "\nlog mrf\nexit 1"},
		{"vfy", "push d," + a(0x10) + "\nvfy_r\npush d," + a(0x10) + "\nvfy_rw\npush d," + a(2*pageSize) + "\nvfy_r\npush d," + a(2*pageSize) + "\nvfy_rw\npush d," + a(3*pageSize) + "\nvfy_r\npush d," + a(3*pageSize) + "\nvfy_rw\npush d,0\nvfy_r\npush d,0x8000000000000000\nvfy_r\nlog 8\nexit 1"},
		{"non-canonical address", "push d,0x8000000000000000\npush mrf,1\nexit 1"},
		{"address 0", "push d,0\npush d,5\npop mrf,4\nexit 1"},
		{"i386 memory", "arch = i386\npush d," + a(0x100) + "\npush mrf,4\npush d,100\npush d," + a(3*pageSize-4) + "\nlog str\nexit 1"},
	}
	before, _, _ := jitexec.Caught()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h.sub(t)
			runDiff(t, h, compileSrc(t, c.src), 2, nil)
		})
	}
	after, sig, addr := jitexec.Caught()
	// the cases' unmapped, non-canonical and null addresses: 30 faults
	// in the compiled code, every run (2 hits of each case)
	if after-before != 30 {
		t.Errorf("%d faults caught, want 30: a fault path did not run, or one ran that should not", after-before)
	}
	t.Logf("%d faults caught, the last signal %d at %#x", after-before, sig, addr)
}

// The fs_base/gs_base fallback through arch_prctl, for kernels that do not
// allow rdfsbase.
func TestBasesBySyscall(t *testing.T) {
	h := newHarness(t, 7)
	for _, fsgs := range []bool{false, true} {
		if fsgs && !hasFSGSBase() {
			t.Log("no FSGSBASE here: rdfsbase not tested")
			continue
		}
		h.fsgsbase = fsgs
		runDiff(t, h, compileSrc(t, "push r,fs_base\npush r,gs_base\nlog 2\nexit 1"), 3, nil)
	}
}
