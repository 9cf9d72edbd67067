package rpn_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/rpn/rpntest"
)

// genEnv is a target for the generator's programs: registers, a memory
// region of rpntest's pages at base (every third page unreadable, every
// other one read-only), system values. Writes go to its own copy.
type genEnv struct {
	regs [rpn.NumRegs]uint64
	base uint64
	mem  []byte
	sys  [5]uint64
}

const genPages = 6

func (e *genEnv) page(addr uint64, n int) (int, bool) {
	if addr < e.base || addr-e.base+uint64(n) > uint64(len(e.mem)) || addr+uint64(n) < addr {
		return 0, false
	}
	return int(addr - e.base), true
}
func (e *genEnv) readable(off, n int) bool {
	for p := off / 4096; p <= (off+n-1)/4096; p++ {
		if p%3 == 2 {
			return false
		}
	}
	return true
}
func (e *genEnv) Reg(r rpn.Reg, user bool) (uint64, bool) { return e.regs[r], true }
func (e *genEnv) SetReg(r rpn.Reg, user bool, v uint64) bool {
	e.regs[r] = v
	return true
}
func (e *genEnv) ReadMem(addr uint64, p []byte) bool {
	off, ok := e.page(addr, len(p))
	if !ok || !e.readable(off, len(p)) {
		return false
	}
	copy(p, e.mem[off:])
	return true
}
func (e *genEnv) WriteMem(addr uint64, p []byte) bool {
	off, ok := e.page(addr, len(p))
	if !ok || !e.readable(off, len(p)) || (off/4096)%2 == 1 || ((off+len(p)-1)/4096)%2 == 1 {
		return false
	}
	copy(e.mem[off:], p)
	return true
}
func (e *genEnv) Access(addr uint64, write bool) bool {
	off, ok := e.page(addr, 1)
	return ok && e.readable(off, 1) && (!write || (off/4096)%2 == 0)
}
func (e *genEnv) Sys(v rpn.SysValue) (uint64, bool) { return e.sys[v], true }
func (e *genEnv) IO(port uint64, size uint8, write bool, v uint64) (uint64, bool) {
	return port * 3, true
}
func (e *genEnv) clone() *genEnv {
	c := *e
	c.mem = bytes.Clone(e.mem)
	return &c
}

// TestLoweringZeroes: the machine clears at a hit only the stack slots
// the lowering says the program may read before writing them. A machine
// whose stack holds an earlier program's values runs every random
// program of the generator the jump pads and the eBPF programs are tested
// with exactly as a new machine does.
func TestLoweringZeroes(t *testing.T) {
	n := 5000
	if testing.Short() {
		n = 1000
	}
	base := uint64(0x7f0000000000)
	var dirty rpn.Machine
	fill := func(rng *rand.Rand) {
		// 32 random words on the stack, then exit 0
		var code []byte
		for range rpn.StackSize {
			code = binary.LittleEndian.AppendUint64(append(code, byte(rpn.OpPushD)), rng.Uint64())
		}
		code = append(code, byte(rpn.OpExit), 0)
		m := &rpn.Module{
			Header: rpn.Header{Name: "fill", JmpMax: 1, LogMax: 8},
			Probes: []rpn.Probe{{Loc: rpn.Location{Text: "0", Kind: rpn.LocAbsolute}, End: uint32(len(code))}},
			Code:   code,
		}
		p, err := rpn.Load(m)
		if err != nil {
			t.Fatal(err)
		}
		dirty.Run(p, 0, &rpn.ProbeState{}, nil, nil, &genEnv{})
	}
	verified, partial := 0, 0
	for seed := uint64(0); seed < uint64(n); seed++ {
		for _, target := range []rpntest.Target{rpntest.Process, rpntest.Kernel} {
			g := &rpntest.Gen{Rng: rand.New(rand.NewPCG(seed, 0x1e)), Base: base, Pages: genPages, Target: target}
			p, err := rpn.Load(g.Module())
			if err != nil {
				continue
			}
			verified++
			if z := p.Lowering(0).Stack.NeedZero; z != ^uint32(0) {
				partial++
			}
			rng := g.Rng
			env := &genEnv{base: base, mem: make([]byte, genPages*4096)}
			for i := range env.regs {
				env.regs[i] = g.Word()
			}
			for i := range env.mem {
				env.mem[i] = byte(rng.Uint32())
			}
			for i := range env.sys {
				env.sys[i] = g.Word()
			}
			vars := func() ([]uint64, []uint64) {
				lv, gv := make([]uint64, p.Module().Vars), make([]uint64, p.Module().GVars)
				for i := range lv {
					lv[i] = uint64(i) * 0x1111
				}
				for i := range gv {
					gv[i] = uint64(i) * 0x2222
				}
				return lv, gv
			}
			fill(rng)
			var st1, st2 rpn.ProbeState
			lv1, gv1 := vars()
			lv2, gv2 := vars()
			env1, env2 := env.clone(), env.clone()
			for hit := 1; hit <= 3; hit++ {
				var fresh rpn.Machine
				want := *fresh.Run(p, 0, &st1, lv1, gv1, env1)
				got := dirty.Run(p, 0, &st2, lv2, gv2, env2)
				if got.Outcome != want.Outcome || got.Exit != want.Exit || got.Exception != want.Exception ||
					got.PC != want.PC || got.Addr != want.Addr || got.Major != want.Major || got.Minor != want.Minor ||
					got.Truncated != want.Truncated || !bytes.Equal(got.Log, want.Log) || (got.Log == nil) != (want.Log == nil) ||
					fmt.Sprint(lv1, gv1) != fmt.Sprint(lv2, gv2) || env1.regs != env2.regs || !bytes.Equal(env1.mem, env2.mem) || st1 != st2 {
					t.Fatalf("seed %d (%v), hit %d: a machine with an earlier stack: %+v\na new machine: %+v\n%s",
						seed, target, hit, *got, want, p.Listing(0))
				}
			}
		}
	}
	if partial == 0 || verified < n {
		t.Errorf("%d programs verified, %d of them with a stack cleared in part: the test proves nothing", verified, partial)
	}
	t.Logf("%d programs verified, %d with a stack cleared in part", verified, partial)
}
