//go:build linux && amd64

package jit_test

import (
	"errors"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/jit"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/rpn/rpntest"
)

// runRandom generates a program from seed, and runs hits hits of it on
// both sides. It reports whether the program verified.
func runRandom(t testing.TB, h *harness, seed uint64, hits int) bool {
	g := &rpntest.Gen{Rng: rand.New(rand.NewPCG(seed, 0x6a17)), Base: h.base, Pages: memPages, Target: rpntest.Process}
	m := g.Module()
	p, err := rpn.Load(m)
	if err != nil {
		if h.refused != nil {
			h.refused[refusal(err)]++
		}
		return false
	}
	h.fsgsbase = hasFSGSBase() && g.Rng.IntN(2) == 0
	r, err := h.start(p)
	if err != nil {
		t.Fatalf("seed %d: compile: %v\n%s", seed, err, p.Listing(0))
	}
	defer r.close()
	*h.clock() = jit.Clock{TSC0: g.Rng.Uint64(), NS0: g.Rng.Uint64(), Mult: g.Rng.Uint64(), Shift: uint64(g.Rng.IntN(128))}
	if g.Rng.IntN(2) == 0 {
		h.setThread(uint32(h.tid), g.Rng.Uint32())
	}
	for i := 0; i < hits; i++ {
		s := h.randomSetup()
		if d := r.hit(s); d != "" {
			t.Fatalf("seed %d, hit %d: %s\n%s", seed, i+1, d, p.Listing(0))
		}
	}
	return true
}

// TestRandom: random programs of every instruction, on both sides, hit
// after hit (pass count, max hits, rem and faults carry over).
func TestRandom(t *testing.T) {
	h := newHarness(t, 8)
	h.stats, h.refused = map[string]int{}, map[string]int{}
	n := 20000
	if testing.Short() {
		n = 2000
	}
	verified := 0
	for seed := uint64(0); seed < uint64(n); seed++ {
		if runRandom(t, h, seed, 4) {
			verified++
		}
	}
	// the generator makes only programs the verifier takes and the jump
	// route compiles (a compile error fails the test in runRandom): every
	// seed runs
	if verified != n {
		t.Errorf("%d of %d programs verified; the verifier refused, by kind: %v", verified, n, h.refused)
	}
	t.Logf("%d programs of %d verified and ran; hits: %v", verified, n, h.stats)
}

var digits = regexp.MustCompile(`[0-9]+`)

// refusal is the kind of a verifier's error: its message with the numbers
// (offsets, values) taken out.
func refusal(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, ": "); i >= 0 && strings.Contains(msg[:i], "offset") {
		msg = msg[i+2:]
	}
	return digits.ReplaceAllString(msg, "N")
}

// FuzzCompile: the random programs from any seed.
func FuzzCompile(f *testing.F) {
	for s := uint64(0); s < 8; s++ {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, seed uint64) {
		h := newHarness(t, seed)
		runRandom(t, h, seed, 4)
	})
}

// The compiler never fails on a verified program for anything but an
// Unsupported reason, whatever the bytes (no execution).
func FuzzCompileBytes(f *testing.F) {
	f.Add([]byte{byte(rpn.OpPushD), 1, 0, 0, 0, 0, 0, 0, 0, byte(rpn.OpLogN), 1, byte(rpn.OpExit), 1}, uint8(0))
	f.Fuzz(func(t *testing.T, code []byte, hdr uint8) {
		m := &rpn.Module{
			Header: rpn.Header{Name: "f", JmpMax: 5, LogMax: 1 + uint32(hdr&63), Vars: uint16(hdr >> 6), GVars: 2,
				Arch: rpn.Arch(hdr >> 7), ModType: rpn.ModType(hdr >> 6 & 1)},
			Probes: []rpn.Probe{{Loc: rpn.Location{Text: "0", Kind: rpn.LocAbsolute}, End: uint32(len(code))}},
			Code:   code,
		}
		p, err := rpn.Load(m)
		if err != nil {
			return
		}
		_, err = jit.Compile(p, 0, jit.Layout{})
		var u *jit.Unsupported
		if err != nil && !errors.As(err, &u) {
			t.Fatal(err)
		}
	})
}
