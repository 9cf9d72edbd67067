package rpn

import (
	"encoding/binary"
	"os"
	"strings"
	"testing"
)

// CompileSource compiles a DPDF's text for FuzzVM's seeds. The DPDF
// compiler (package compiler) is above rpn, so this package's own tests
// cannot import it; fuzzhook_test.go, in package rpn_test, sets it.
var CompileSource func(name, text string) (*Module, error)

// fuzzEnv is a target that answers from a seed: registers hold
// seed-derived values, memory is readable on some pages and not others,
// writes succeed or fail, system values, IO, fields, switching and
// instance variables exist or not.
type fuzzEnv struct {
	seed uint64
	iv   [MaxIV]uint64
}

func (e *fuzzEnv) mix(x uint64) uint64 {
	x ^= e.seed
	x *= 0x9e3779b97f4a7c15
	return x ^ x>>29
}
func (e *fuzzEnv) Reg(r Reg, user bool) (uint64, bool) {
	return e.mix(uint64(r)), e.mix(uint64(r)+99)&7 != 0
}
func (e *fuzzEnv) SetReg(r Reg, user bool, v uint64) bool {
	return e.mix(uint64(r)+7)&3 != 0
}
func (e *fuzzEnv) ReadMem(addr uint64, p []byte) bool {
	if e.mix(addr>>12)&3 == 0 {
		return false
	}
	for i := range p {
		p[i] = byte(e.mix(addr + uint64(i)))
	}
	return true
}
func (e *fuzzEnv) WriteMem(addr uint64, p []byte) bool { return e.mix(addr>>12)&3 != 0 }
func (e *fuzzEnv) Access(addr uint64, write bool) bool { return e.mix(addr>>12)&3 != 0 }
func (e *fuzzEnv) Sys(v SysValue) (uint64, bool) {
	return e.mix(uint64(v) + 1000), v != SysTask || e.seed&1 == 0
}
func (e *fuzzEnv) IO(port uint64, size uint8, write bool, v uint64) (uint64, bool) {
	return e.mix(port), e.seed&2 == 0
}
func (e *fuzzEnv) Field(name string) (uint64, bool) {
	return e.mix(uint64(len(name)) + 2000), e.seed&16 == 0
}
func (e *fuzzEnv) Switch(minor uint16, on bool) bool { return e.seed&32 == 0 }
func (e *fuzzEnv) IV() *[MaxIV]uint64 {
	if e.seed&64 != 0 {
		return nil // a hit in no call
	}
	return &e.iv
}

// asTracepoint makes the fuzz module's probe a tracepoint probe with two
// fields, when the seed says so, so push field is reached.
func asTracepoint(m *Module, seed uint64) {
	if seed&8 == 0 {
		asWatch(m, seed)
		return
	}
	m.ModType = ModKernel
	m.Probes[0].Kind = ProbeTracepoint
	m.Probes[0].Loc = Location{Text: "sched:sched_switch", Kind: LocTracepoint}
	m.Fields = []string{"prev_pid", "next_pid"}
}

// asWatch makes the fuzz module's probe a watch probe, disabled, when the
// seed says so, so that iv is refused in it.
func asWatch(m *Module, seed uint64) {
	if seed&128 == 0 {
		return
	}
	p := &m.Probes[0]
	p.Kind, p.WatchLen, p.WatchMode, p.Disabled = ProbeWatch, 4, WatchWrite, true
}

// moduleFromFuzz builds a one-probe module from fuzz input: 8 bytes of
// header choices, then the code.
func moduleFromFuzz(data []byte) *Module {
	if len(data) < 9 {
		return nil
	}
	h := Header{
		Name:     "fuzz",
		Arch:     Arch(data[0] & 1),
		ModType:  ModType(data[0] >> 1 & 1),
		DfltExit: data[0] >> 2 % 5,
		Vars:     uint16(data[1]),
		GVars:    uint16(data[2]),
		LogMax:   uint32(binary.LittleEndian.Uint16(data[3:])) + 1,
		JmpMax:   uint32(binary.LittleEndian.Uint16(data[5:])) | 1,
		Major:    uint16(data[7]),
	}
	code := append([]byte(nil), data[8:]...)
	return &Module{
		Header: h,
		Probes: []Probe{{Loc: Location{Text: "0", Kind: LocAbsolute}, Entry: 0, End: uint32(len(code)), MaxHits: uint64(data[7] % 4)}},
		Code:   code,
		Files:  []string{"fuzz"},
	}
}

func fuzzHeader(m *Module) []byte {
	h := m.Header
	b := []byte{byte(h.Arch) | byte(h.ModType)<<1 | h.DfltExit<<2, byte(h.Vars), byte(h.GVars)}
	b = binary.LittleEndian.AppendUint16(b, uint16(h.LogMax-1))
	b = binary.LittleEndian.AppendUint16(b, uint16(h.JmpMax))
	b = append(b, byte(h.Major))
	return b
}

// FuzzVM: every program that passes verification runs without panicking
// against any environment, and its results keep the machine's promises.
func FuzzVM(f *testing.F) {
	if CompileSource == nil {
		f.Fatal("CompileSource is not set: fuzzhook_test.go (package rpn_test) sets it")
	}
	// seed with every program of the semantics table
	data, err := os.ReadFile("testdata/vm.txt")
	if err != nil {
		f.Fatal(err)
	}
	for _, block := range strings.Split(string(data), "\n=== ")[1:] {
		lines := strings.Split(block, "\n")[1:]
		var src []string
		for _, l := range lines {
			if strings.HasPrefix(l, "---") {
				break
			}
			src = append(src, l)
		}
		text := "name = fuzz\nmodtype = kernel\nvars = 4\ngvars = 4\noffset = 0\n" + strings.Join(src, "\n") + "\n"
		m, err := CompileSource("seed", text)
		if err != nil || len(m.Probes) == 0 {
			continue
		}
		p := m.Probes[0]
		f.Add(append(fuzzHeader(m), m.Code[p.Entry:p.End]...), uint64(len(text)))
	}
	// a tracepoint's fields, present (seed bit 3) and absent (bit 4)
	tp := cat(OpPushField, 1, 0, OpPushField, 0, 0, OpLogN, 2, OpExit, 1)
	f.Add(append(fuzzHeader(&Module{Header: Header{LogMax: 64, JmpMax: 1}}), tp...), uint64(8))
	f.Add(append(fuzzHeader(&Module{Header: Header{LogMax: 64, JmpMax: 1}}), tp...), uint64(8|16))
	// switching (bit 5: the Env refuses) and instance variables (bit 6:
	// the hit is in no call), in an offset probe and a watch probe (bit 7)
	sw := cat(OpEnable, 3, 0, OpPushIV, 7, OpPushD, make([]byte, 8), OpAdd, OpPopIV, 0, OpDisable, 0xff, 0xff, OpPushIV, 0, OpLogN, 1, OpExit, 1)
	for _, seed := range []uint64{0, 32, 64, 128, 32 | 128} {
		f.Add(append(fuzzHeader(&Module{Header: Header{LogMax: 64, JmpMax: 1}}), sw...), seed)
	}
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		m := moduleFromFuzz(data)
		if m == nil {
			return
		}
		asTracepoint(m, seed)
		p, err := Load(m)
		if err != nil {
			return
		}
		env := &fuzzEnv{seed: seed}
		var mach Machine
		var st ProbeState
		lv := make([]uint64, m.Vars)
		gv := make([]uint64, m.GVars)
		for hit := 0; hit < 3; hit++ {
			r := mach.Run(p, 0, &st, lv, gv, env)
			if len(r.Log) > int(m.LogMax) {
				t.Fatalf("log of %d bytes, logmax %d", len(r.Log), m.LogMax)
			}
			switch r.Outcome {
			case OutcomeException:
				if r.Log != nil || r.Exception == ExNone || int(r.PC) >= len(m.Code) {
					t.Fatalf("bad exception result %+v", r)
				}
			case OutcomeExit:
				if r.Exit > MaxFacility || (r.Exit == ExitNone) != (r.Log == nil) {
					t.Fatalf("bad exit result %+v", r)
				}
			case OutcomeAbort, OutcomeSkipped:
				if r.Log != nil {
					t.Fatalf("%v committed a log", r.Outcome)
				}
			}
		}
	})
}
