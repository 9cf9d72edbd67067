//go:build linux

package kernel

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/arch/x86/x86asm"

	"github.com/gprobes/gprobes/bpf"
	"github.com/gprobes/gprobes/internal/testkit"
)

// TestKmemReadsText: the kernel's text read through eBPF is the text:
// __x64_sys_getppid's first instruction is a known prologue (ftrace's
// 5-byte nop or its call, or endbr64), and every direct call in its first
// bytes lands on a function /proc/kallsyms lists, so the bytes are that
// function's and not some other memory's. A user address is refused.
func TestKmemReadsText(t *testing.T) {
	if err := bpf.Available(); err != nil {
		testkit.SkipOrFail(t, "%v", err)
	}
	k, err := newKmem()
	if err != nil {
		t.Fatal(err)
	}
	defer k.close()
	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var addr uint64
	funcs := map[uint64]string{}
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 3 || (fs[1] != "t" && fs[1] != "T") {
			continue
		}
		a, _ := strconv.ParseUint(fs[0], 16, 64)
		funcs[a] = fs[2]
		if fs[2] == "__x64_sys_getppid" {
			addr = a
		}
	}
	if addr == 0 {
		t.Fatal("no __x64_sys_getppid in /proc/kallsyms")
	}
	b := make([]byte, 64)
	if err := k.read(addr, b); err != nil {
		t.Fatal(err)
	}
	t.Logf("%#x: % x", addr, b)
	switch {
	case bytes.HasPrefix(b, []byte{0x0f, 0x1f, 0x44, 0x00, 0x00}): // nop, ftrace off here
	case bytes.HasPrefix(b, []byte{0xf3, 0x0f, 0x1e, 0xfa}): // endbr64 (IBT)
	case b[0] == 0xe8: // call: ftrace on here
	default:
		t.Fatalf("__x64_sys_getppid starts % x: not a kernel function's prologue", b[:5])
	}
	var calls []string
	for off := 0; off < len(b); {
		in, err := x86asm.Decode(b[off:], 64)
		if err != nil {
			break // the read's end cut an instruction
		}
		pc := addr + uint64(off)
		if in.Op == x86asm.CALL && off > 0 {
			if rel, ok := in.Args[0].(x86asm.Rel); ok {
				target := pc + uint64(in.Len) + uint64(int64(rel))
				name, ok := funcs[target]
				if !ok {
					t.Errorf("%#x: call %#x: no function of /proc/kallsyms starts there", pc, target)
				}
				calls = append(calls, name)
			}
		}
		if in.Op == x86asm.RET || in.Op == x86asm.INT || in.Op == x86asm.JMP {
			break
		}
		off += in.Len
	}
	if len(calls) == 0 {
		t.Fatalf("no direct call in __x64_sys_getppid's first %d bytes: % x", len(b), b)
	}
	t.Logf("calls %v", calls)
	if err := k.read(8, b); err == nil {
		t.Fatal("read of address 8 worked")
	} else {
		t.Log(err)
	}
}
