package symbols

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/internal/testkit"
)

// writeMap writes a System.map of n lines like a kernel's: sorted
// addresses, a mix of letters, names of kernel length.
func writeMap(tb testing.TB, n int, modules bool) string {
	tb.Helper()
	var b bytes.Buffer
	kinds := "TtTtDdBbRrWt"
	addr := uint64(0xffffffff81000000)
	for i := range n {
		addr += uint64(16 + i%240)
		fmt.Fprintf(&b, "%016x %c %s_%d", addr, kinds[i%len(kinds)], [...]string{"do_sys_open", "ext4_file_write_iter", "__x64_sys_read", "tcp_v4_rcv", "kmem_cache_alloc_node"}[i%5], i)
		if modules && i%10 == 0 {
			fmt.Fprintf(&b, "\t[mod%d]", i%7)
		}
		b.WriteByte('\n')
	}
	path := filepath.Join(tb.TempDir(), "System.map")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		tb.Fatal(err)
	}
	return path
}

// BenchmarkOpenSystemMap loads a 200,000-line System.map: the figure the
// compiler pays per --symbols file.
func BenchmarkOpenSystemMap(b *testing.B) {
	path := writeMap(b, 200_000, false)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := Open(path); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOpenKallsyms is the same size with a module on every tenth line.
func BenchmarkOpenKallsyms(b *testing.B) {
	path := writeMap(b, 200_000, true)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := Open(path); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkScanBaseline is the floor to compare with: the same file read
// with a bufio.Scanner and split with strings.Fields, building nothing.
func BenchmarkScanBaseline(b *testing.B) {
	path := writeMap(b, 200_000, false)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		n := 0
		for sc.Scan() {
			n += len(strings.Fields(sc.Text()))
		}
		f.Close()
		if n == 0 {
			b.Fatal("empty")
		}
	}
}

// BenchmarkLookup is one name lookup in the 200,000-line table.
func BenchmarkLookup(b *testing.B) {
	tb, err := Open(writeMap(b, 200_000, false))
	if err != nil {
		b.Fatal(err)
	}
	s := NewSet(tb)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.Lookup("tcp_v4_rcv_123458"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNearest is one reverse lookup (after the first, which sorts).
func BenchmarkNearest(b *testing.B) {
	tb, err := Open(writeMap(b, 200_000, false))
	if err != nil {
		b.Fatal(err)
	}
	s := NewSet(tb)
	s.Nearest(0)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, _, ok := s.Nearest(0xffffffff82000000); !ok {
			b.Fatal("not found")
		}
	}
}

// BenchmarkNotFound is the error path: suggestions need a pass over every name.
func BenchmarkNotFound(b *testing.B) {
	tb, err := Open(writeMap(b, 200_000, false))
	if err != nil {
		b.Fatal(err)
	}
	s := NewSet(tb)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		var nf *NotFoundError
		if _, err := s.Lookup("tcp_v4_rvc_123458"); !errors.As(err, &nf) || len(nf.Suggestions) == 0 {
			b.Fatal(err)
		}
	}
}

// TestProcKallsyms opens the running kernel's /proc/kallsyms when there is
// one: either real addresses, or the documented error for a restricted read.
func TestProcKallsyms(t *testing.T) {
	if _, err := os.Stat("/proc/kallsyms"); err != nil {
		testkit.SkipOrFail(t, "no /proc/kallsyms: %v", err)
	}
	tb, err := Open("/proc/kallsyms")
	switch {
	case errors.Is(err, ErrZeroAddresses):
		t.Logf("restricted: %v", err)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	s := NewSet(tb)
	sym, err := s.Lookup("_stext")
	if err != nil {
		t.Fatal(err)
	}
	if fn, ok := s.SymbolAt(sym.Addr); !ok || fn.Addr != sym.Addr {
		t.Errorf("SymbolAt(_stext) = %+v, %v", fn, ok)
	}
	t.Logf("%d symbols, format %s", tb.Len(), tb.Format())
}
