//go:build linux && amd64

package jit_test

import (
	"sync"
	"testing"
	"unsafe"

	"github.com/gprobes/gprobes/internal/jitexec"
	"github.com/gprobes/gprobes/jit"
	"golang.org/x/sys/unix"
)

// Threads hitting one compiled probe at once: every hit counted, exactly
// MaxHits runs (each counted by an atomic inc gv, each committing), the
// others skipped, the pass count honoured.
func TestConcurrentCounters(t *testing.T) {
	const threads, hits = 8, 50000
	for _, c := range []struct {
		name                string
		src                 string
		passCount, maxHits  uint64
		wantRuns, wantSkips uint64
	}{
		{"max hits", "gvars = 1\nmaxhits = 5000\ninc gv,0\npush d,1\nlog 1\nexit 1", 0, 5000, 5000, threads*hits - 5000},
		{"max hits 1", "gvars = 1\nmaxhits = 1\ninc gv,0\npush d,1\nlog 1\nexit 1", 0, 1, 1, threads*hits - 1},
		{"pass count", "gvars = 1\npasscount = 1000\ninc gv,0\npush d,1\nlog 1\nexit 1", 1000, 0, threads*hits - 1000, 1000},
		{"i386 inc", "arch = i386\ngvars = 1\ninc gv,0\npush d,1\nlog 1\nexit 1", 0, 0, threads * hits, 0},
		{"i386 dec", "arch = i386\ngvars = 1\ndec gv,0\npush d,1\nlog 1\nexit 1", 0, 0, threads * hits, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, 9)
			p := compileSrc(t, c.src)
			r, err := h.start(p)
			if err != nil {
				t.Fatal(err)
			}
			*h.u64(dGV) = 0
			per := jit.ScratchSize(int(p.Module().LogMax)) + 256
			area, err := unix.Mmap(-1, 0, threads*per, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Munmap(area)
			commits := make([]int, threads)
			var wg sync.WaitGroup
			for g := 0; g < threads; g++ {
				st, err := jitexec.NewStack()
				if err != nil {
					t.Fatal(err)
				}
				defer st.Close()
				frame := uintptr(unsafe.Pointer(&area[g*per]))
				scratch := frame + 256
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < hits; i++ {
						if r.x.CallOn(st, frame, scratch) == jit.ResultCommit {
							commits[g]++
						}
					}
				}()
			}
			wg.Wait()
			cn := *h.counters()
			total := 0
			for _, n := range commits {
				total += n
			}
			wantGV := c.wantRuns
			if p.WordSize() == 4 {
				wantGV &= 0xffffffff
				if c.name == "i386 dec" {
					wantGV = -c.wantRuns & 0xffffffff
				}
			}
			if cn.Hits != threads*hits || cn.Runs != c.wantRuns || cn.Skipped != c.wantSkips ||
				uint64(total) != c.wantRuns || *h.u64(dGV) != wantGV || cn.Faults != 0 {
				t.Errorf("counters %+v, %d commits, gv %#x; want %d runs, %d skipped, gv %#x",
					cn, total, *h.u64(dGV), c.wantRuns, c.wantSkips, wantGV)
			}
			if (cn.Disabled != 0) != (c.maxHits > 0) {
				t.Errorf("disabled %d", cn.Disabled)
			}
		})
	}
}

// A thread that finds Runs already at MaxHits without Disabled set (it
// passed the check before the MaxHits-th run set Disabled) does not run,
// counts as skipped and gives its run back. The machine, which runs one
// hit at a time, never meets that state; this is the compiled code's own
// rule.
func TestRunBeyondMaxHits(t *testing.T) {
	h := newHarness(t, 10)
	p := compileSrc(t, "gvars = 1\nmaxhits = 3\ninc gv,0\npush d,1\nlog 1\nexit 1")
	r, err := h.start(p)
	if err != nil {
		t.Fatal(err)
	}
	*h.u64(dGV) = 0
	*h.counters() = jit.Counters{Hits: 3, Runs: 3}
	ret := r.x.Call(uintptr(h.addr(dFrame)), uintptr(h.addr(dScratch)))
	want := jit.Counters{Hits: 4, Skipped: 1, Runs: 3}
	if ret != jit.ResultNone || *h.counters() != want || *h.u64(dGV) != 0 {
		t.Errorf("returned %d, counters %+v, gv %d; want 0, %+v, 0", ret, *h.counters(), *h.u64(dGV), want)
	}
}

// Words wider than 32 bits in an i386 module (variables may hold them):
// the operations the machine does not mask see the whole word.
func TestI386WideWords(t *testing.T) {
	h := newHarness(t, 11)
	src := "arch = i386\nvars = 2\n" +
		"push lv,0\nshr 4\npush lv,0\npush d,7\nshr\npush lv,1\npush d,3\ndiv\n" +
		"push lv,0\npush lv,1\nand\nshr 16\npush lv,0\npush lv,1\nor\nshr 20\npush lv,0\npush lv,1\nxor\nshr 24\n" +
		"push lv,0\nshl 4\npush lv,0\nsar 4\npush lv,0\nror 4\npush lv,0\npush d,1\nadd\nshr 1\n" +
		"log 12\npush lv,0\npush d,1\npush d,2\nmul\nmul\nshr 1\npush lv,1\nnot\nshr 1\npush lv,0\nneg\nshr 1\nlog 3\nexit 1"
	p := compileSrc(t, src)
	for _, v := range [][2]uint64{{0x123456789abcdef0, 0xfedcba9876543210}, {0xffffffff00000001, 5}, {1 << 32, 1 << 63}} {
		r, err := h.start(p)
		if err != nil {
			t.Fatal(err)
		}
		r.ref.LV[0], *h.u64(dLV) = v[0], v[0]
		r.ref.LV[1], *h.u64(dLV + 8) = v[1], v[1]
		if d := r.hit(h.randomSetup()); d != "" {
			t.Fatalf("lv %#x: %s\n%s", v, d, p.Listing(0))
		}
		r.close()
	}
}
