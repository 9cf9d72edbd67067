package symbols

import (
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// BenchmarkLargeDWARFCost measures the first queries on a large ELF file,
// such as a vmlinux built with debug information, once (cold caches: run
// it with -benchtime 1x). It runs only when SYMBOLS_LARGE_ELF names the
// file; SYMBOLS_LARGE_TYPE (default "struct
// task_struct") and SYMBOLS_LARGE_FIELD (default "pid") choose the lookup,
// SYMBOLS_LARGE_RARE (default a type that does not exist) one defined only
// in the last compile unit.
// The figures in docs/symbols.md come from here.
//
//	SYMBOLS_LARGE_ELF=/path/to/vmlinux go test -run '^$' -bench LargeDWARF -benchtime 1x -v ./symbols/
func BenchmarkLargeDWARFCost(b *testing.B) {
	path := os.Getenv("SYMBOLS_LARGE_ELF")
	if path == "" {
		b.Skip("set SYMBOLS_LARGE_ELF to a large ELF file with DWARF")
	}
	t := b
	typ := cmpOr(os.Getenv("SYMBOLS_LARGE_TYPE"), "struct task_struct")
	field := cmpOr(os.Getenv("SYMBOLS_LARGE_FIELD"), "pid")

	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc >> 20
	}
	step := func(what string, f func() string) {
		start := time.Now()
		res := f()
		t.Logf("%-40s %10v  heap %4d MiB  %s", what, time.Since(start).Round(time.Microsecond), heap(), res)
	}
	var tb *Table
	step("Open", func() string {
		var err error
		if tb, err = Open(path); err != nil {
			t.Fatal(err)
		}
		return ""
	})
	s := NewSet(tb)
	result := func(v uint64, err error) string {
		if err != nil {
			return "error: " + err.Error()
		}
		return "= " + itoa(v)
	}
	step("read DWARF (debug/elf, unit list)", func() string {
		tb.mu.Lock()
		defer tb.mu.Unlock()
		if _, err := tb.loadDWARF(); err != nil {
			t.Fatal(err)
		}
		return ""
	})
	step("first Sizeof("+typ+")", func() string { return result(s.Sizeof(typ)) })
	step("Offsetof("+typ+", "+field+")", func() string { return result(s.Offsetof(typ, field)) })
	step("Sizeof("+typ+") again (cached)", func() string { return result(s.Sizeof(typ)) })
	rare := cmpOr(os.Getenv("SYMBOLS_LARGE_RARE"), "struct no_such_type")
	step("Sizeof("+rare+") (indexes every unit)", func() string { return result(s.Sizeof(rare)) })
	step("Sizeof(struct no_such_type2) (index complete)", func() string { return result(s.Sizeof("struct no_such_type2")) })
	tb.mu.Lock()
	units, names := len(tb.dw.units), len(tb.dw.types.names)
	tb.mu.Unlock()
	t.Logf("%d units, %d type names indexed", units, names)
	step("LineAddr(main.c:3) (parses line tables)", func() string {
		a, l, err := s.LineAddr("main.c", 3)
		if err != nil {
			return "error: " + err.Error()
		}
		return "= " + itoa(a) + " line " + itoa(uint64(l))
	})
	runtime.KeepAlive(s)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func itoa(v uint64) string { return strconv.FormatUint(v, 10) }
