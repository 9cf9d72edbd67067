//go:build linux

package bpf_test

import (
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"testing"

	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/rpn/rpntest"
)

// TestRandom: random programs of every instruction the kernel target
// compiles, in the kernel and in the machine, hit after hit.
func TestRandom(t *testing.T) {
	needBPF(t)
	r := newRegion(t, 3)
	n := 120
	if testing.Short() {
		n = 40
	}
	if s := os.Getenv("GPROBES_BPF_RANDOM"); s != "" {
		n, _ = strconv.Atoi(s) // more programs, for a longer search
	}
	verified, loops := 0, 0
	for seed := uint64(0); seed < uint64(n); seed++ {
		g := &rpntest.Gen{Rng: rand.New(rand.NewPCG(seed, 0xb9f)), Base: r.base, Pages: memPages, Target: rpntest.Kernel}
		p, err := rpn.Load(g.Module())
		if err != nil {
			continue
		}
		verified++
		ok := t.Run("", func(t *testing.T) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			k := startRun(t, p, r, g.Rng, seed%3 == 0) // a third forced into loop mode
			if k.compiled.Loop {
				loops++
			}
			for i := 0; i < 4; i++ {
				var args [6]uint64
				for j := range args {
					args[j] = randWord(g.Rng, 8)
				}
				if d := k.hit(args); d != "" {
					t.Fatalf("seed %d, hit %d (args %#x): %s\n%s", seed, i+1, args, d, p.Listing(0))
				}
			}
		})
		if !ok {
			break
		}
	}
	if verified < n/2 {
		t.Errorf("only %d of %d programs verified", verified, n)
	}
	t.Logf("%d programs of %d verified and ran in the kernel (%d in loop mode), 4 hits each", verified, n, loops)
}
