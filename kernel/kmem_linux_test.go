//go:build linux

package kernel

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/bpf"
	"github.com/gprobes/gprobes/internal/testkit"
)

// TestKmemReadsText: the kernel's text read through eBPF; a user address
// is refused.
func TestKmemReadsText(t *testing.T) {
	if err := bpf.Available(); err != nil {
		testkit.SkipOrFail(t, "%v", err)
	}
	k, err := newKmem()
	if err != nil {
		t.Fatal(err)
	}
	defer k.close()
	f, _ := os.Open("/proc/kallsyms")
	sc := bufio.NewScanner(f)
	var addr uint64
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 3 && fs[2] == "__x64_sys_getppid" {
			addr, _ = strconv.ParseUint(fs[0], 16, 64)
		}
	}
	if addr == 0 {
		t.Fatal("no __x64_sys_getppid in /proc/kallsyms")
	}
	b := make([]byte, 16)
	if err := k.read(addr, b); err != nil {
		t.Fatal(err)
	}
	t.Logf("%#x: % x", addr, b)
	if err := k.read(8, b); err == nil {
		t.Fatal("read of address 8 worked")
	} else {
		t.Log(err)
	}
}
