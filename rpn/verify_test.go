package rpn

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestEveryOpcodeHasANameAndFormat(t *testing.T) {
	for op := OpInvalid + 1; op < numOpcodes; op++ {
		info := opTable[op]
		if info.name == "" || info.name == "(invalid)" {
			t.Errorf("opcode %d has no name", op)
		}
		if op.Len() < 1 {
			t.Errorf("%s has no length", op)
		}
	}
	if OpInvalid.Len() != 0 || Opcode(numOpcodes).Len() != 0 || Opcode(255).Len() != 0 {
		t.Error("invalid opcodes have a length")
	}
}

func TestEveryRegisterHasAName(t *testing.T) {
	for r := Reg(0); r < NumRegs; r++ {
		name := r.String()
		got, ok := LookupReg(ArchX86_64, name)
		if !ok || got != r {
			t.Errorf("register %d: %q looks up as %v, %v", r, name, got, ok)
		}
	}
	for _, n := range []string{"eax", "esp", "eip", "eflags", "r15d", "EAX", "Rip"} {
		if _, ok := LookupReg(ArchX86_64, n); !ok {
			t.Errorf("%s missing on x86_64", n)
		}
	}
	for n, ok := range map[string]bool{"eax": true, "eip": true, "cs": true, "cr3": true, "rax": false, "r8": false, "r8d": false, "fs_base": false} {
		if _, got := LookupReg(ArchI386, n); got != ok {
			t.Errorf("i386 %s: %v, want %v", n, got, ok)
		}
	}
}

// asm builds a one-probe module from raw code.
func asm(code ...byte) *Module {
	return &Module{
		Header: Header{Name: "t", JmpMax: 10, LogMax: 64, DfltExit: 1, Vars: 2, GVars: 1},
		Probes: []Probe{{Loc: Location{Text: "0x1000", Kind: LocAbsolute, Resolved: true, Addr: 0x1000}, Entry: 0, End: uint32(len(code))}},
		Code:   code,
		Files:  []string{"t.dpdf"},
	}
}

func u32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }

func cat(parts ...any) []byte {
	var b []byte
	for _, p := range parts {
		switch p := p.(type) {
		case Opcode:
			b = append(b, byte(p))
		case byte:
			b = append(b, p)
		case int:
			b = append(b, byte(p))
		case []byte:
			b = append(b, p...)
		}
	}
	return b
}

func TestVerifierRefuses(t *testing.T) {
	exit := cat(OpExit, 1)
	cases := []struct {
		name string
		m    *Module
		want string
	}{
		{"unknown opcode", asm(cat(byte(200), exit)...), "unknown opcode 0xc8"},
		{"opcode zero", asm(cat(OpInvalid, exit)...), "unknown opcode"},
		{"truncated operand", asm(byte(OpPushD), 1, 2), "operands run past the end"},
		{"runs off the end", asm(byte(OpNop)), "run off its end"},
		{"conditional jump last", asm(cat(OpJz, u32(0))...), "run off its end"},
		{"jump outside the probe", asm(cat(OpJmp, u32(100))...), "outside this probe's program"},
		{"jump into an instruction", asm(cat(OpJz, u32(1), exit)...), "middle of an instruction"},
		{"exit facility", asm(byte(OpExit), 5), "exit facility 5"},
		{"log count zero", asm(cat(OpLogN, 0, exit)...), "count 0"},
		{"ros 33", asm(cat(OpRos, 33, exit)...), "count 33"},
		{"lv index", asm(cat(OpPushLVI, 2, 0, exit)...), "index outside vars = 2"},
		{"gv index", asm(cat(OpIncGVI, 1, 0, exit)...), "index outside gvars = 1"},
		{"log lv range", asm(cat(OpLogLV, 1, 0, 2, 0, exit)...), "reaches past the 2 variables"},
		{"register number", asm(cat(OpPushR, 99, 0, exit)...), "does not exist"},
		{"32-bit view of a segment", asm(cat(OpPushR, byte(RegCS), 1, exit)...), "invalid"},
		{"control register in user code", asm(cat(OpPushR, byte(RegCR3), 0, exit)...), "kernel probe"},
		{"write a segment register", asm(cat(OpPopR, byte(RegSS), 0, exit)...), "read-only"},
		{"push u in user code", asm(cat(OpPushU, 0, 0, exit)...), "user module"},
		{"size 3", asm(cat(OpPushMrf, 3, exit)...), "size must be"},
		{"io size 8", asm(cat(OpPushIO, 8, exit)...), "port IO size"},
		{"shift 64", asm(cat(OpShlI, 64, exit)...), "below the word width"},
		{"push task in user code", asm(cat(OpPushTask, exit)...), "user module"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(c.m)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
			// %+v adds the listing with the failing instruction marked
			if full := fmt.Sprintf("%+v", err); !strings.Contains(full, "=>") {
				t.Errorf("%%+v has no marked listing:\n%s", full)
			}
		})
	}

	header := []struct {
		name string
		edit func(*Module)
		want string
	}{
		{"empty name", func(m *Module) { m.Name = "" }, "name is empty"},
		{"jmpmax 0", func(m *Module) { m.JmpMax = 0 }, "jmpmax"},
		{"logmax", func(m *Module) { m.LogMax = MaxLogMax + 1 }, "logmax"},
		{"vars", func(m *Module) { m.Vars = 257 }, "vars"},
		{"arch", func(m *Module) { m.Arch = 7 }, "arch"},
		{"probe range", func(m *Module) { m.Probes[0].End = 99 }, "outside the code"},
		{"empty probe", func(m *Module) { m.Probes[0].End = 0 }, "outside the code"},
		{"reloc not at push d", func(m *Module) { m.Relocs = []Reloc{{Off: 2, Expr: "x"}} }, "does not point at a push d"},
		{"lines unsorted", func(m *Module) { m.Lines = []LineEntry{{PC: 1}, {PC: 0}} }, "out of order"},
		{"line file", func(m *Module) { m.Lines = []LineEntry{{PC: 0, Pos: Pos{File: 4}}} }, "names file 4"},
		{"i386 immediate", func(m *Module) {
			m.Arch = ArchI386
			m.Code = cat(OpPushD, binary.LittleEndian.AppendUint64(nil, 1<<40), OpExit, 1)
			m.Probes[0].End = uint32(len(m.Code))
		}, "32-bit word"},
	}
	for _, c := range header {
		t.Run(c.name, func(t *testing.T) {
			m := asm(cat(OpPushD, make([]byte, 8), OpExit, 1)...)
			c.edit(m)
			if _, err := Load(m); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
}

// tracepointProbe turns asm's probe into a tracepoint probe of a kernel
// module with the field table fields.
func tracepointProbe(m *Module, fields ...string) *Module {
	m.ModType = ModKernel
	m.Probes[0].Kind = ProbeTracepoint
	m.Probes[0].Loc = Location{Text: "sched:sched_switch", Kind: LocTracepoint}
	m.Fields = fields
	return m
}

// TestVerifierRefusesKinds: what the compiler never writes about probe
// kinds, and a PPDF may hold, is refused with the probe named.
func TestVerifierRefusesKinds(t *testing.T) {
	exit := cat(OpExit, 1)
	field := func(i uint16) []byte { return cat(OpPushField, byte(i), byte(i>>8), OpPop, exit) }
	tp := func(code []byte, fields ...string) *Module { return tracepointProbe(asm(code...), fields...) }
	edit := func(m *Module, f func(m *Module)) *Module { f(m); return m }
	arg := func(n byte) []byte { return cat(OpPushArg, n, OpPop, exit) }
	usdt := func(m *Module) {
		m.Probes[0].Kind, m.Probes[0].Loc.Kind, m.Probes[0].Loc.Text, m.ModType = ProbeUSDT, LocUSDT, "prov:name", ModUser
	}
	for _, c := range []struct {
		name string
		m    *Module
		want string
	}{
		{"unknown kind", edit(asm(exit...), func(m *Module) { m.Probes[0].Kind = 5 }), "unknown probe kind 5"},
		{"unknown location kind", edit(asm(exit...), func(m *Module) { m.Probes[0].Loc.Kind = 5 }), "unknown location kind 5"},
		{"push arg in an offset probe", asm(arg(1)...), "push arg in an offset probe: only a usdt probe has arguments"},
		{"push arg,0", edit(asm(arg(0)...), usdt), "push arg,0: argument outside 1..12"},
		{"push arg,13", edit(asm(arg(13)...), usdt), "push arg,13: argument outside 1..12"},
		{"usdt kind, offset location", edit(asm(exit...), func(m *Module) { m.Probes[0].Kind = ProbeUSDT }), "a usdt location goes with a usdt probe"},
		{"usdt location, offset kind", edit(asm(exit...), func(m *Module) { m.Probes[0].Loc.Kind = LocUSDT }), "a usdt location goes with a usdt probe"},
		{"usdt in a kernel module", edit(asm(exit...), func(m *Module) {
			m.Probes[0].Kind, m.Probes[0].Loc.Kind, m.Probes[0].Loc.Text, m.ModType = ProbeUSDT, LocUSDT, "p:n", ModKernel
		}), "usdt probe in a kernel module"},
		{"usdt not PROVIDER:NAME", edit(asm(exit...), func(m *Module) {
			m.Probes[0].Kind, m.Probes[0].Loc.Kind, m.Probes[0].Loc.Text, m.ModType = ProbeUSDT, LocUSDT, "pn", ModUser
		}), `usdt "pn"`},
		{"tracepoint location on an offset probe", edit(tp(exit), func(m *Module) { m.Probes[0].Kind = ProbeOffset }),
			"an offset probe with a tracepoint location"},
		{"tracepoint probe at an address", edit(tp(exit), func(m *Module) { m.Probes[0].Loc = Location{Text: "0x1000", Kind: LocAbsolute} }),
			"a tracepoint probe with an absolute location"},
		{"tracepoint path", edit(tp(exit), func(m *Module) { m.Probes[0].Loc.Text = "../../x:y" }),
			`tracepoint "../../x:y": '.' cannot be in a subsystem or event name`},
		{"tracepoint without event", edit(tp(exit), func(m *Module) { m.Probes[0].Loc.Text = "sched" }), "no ':'"},
		{"tracepoint in user code", edit(tp(exit), func(m *Module) { m.ModType = ModUser }), "tracepoint probe in a user module"},
		{"tracepoint opcode", edit(tp(exit), func(m *Module) { m.Probes[0].HasOpcode = true }), "opcode check on a tracepoint probe"},
		{"tracepoint logonfault", edit(tp(exit), func(m *Module) { m.Probes[0].LogOnFault = true }), "logonfault on a tracepoint probe"},
		{"retprobe opcode", edit(asm(exit...), func(m *Module) { m.Probes[0].Kind, m.Probes[0].HasOpcode = ProbeRetprobe, true }),
			"opcode check on a retprobe: only an offset probe has one"},
		{"retprobe on a line", edit(asm(exit...), func(m *Module) {
			m.Probes[0].Kind, m.Probes[0].Loc = ProbeRetprobe, Location{Text: "a.c:1", Kind: LocLine, File: "a.c", Line: 1}
		}), "retprobe on a source line"},
		{"maxactive on an offset probe", edit(asm(exit...), func(m *Module) { m.Probes[0].MaxActive = 8 }), "maxactive 8 on an offset probe: only a retprobe has one"},
		{"maxactive on a tracepoint", edit(tp(exit), func(m *Module) { m.Probes[0].MaxActive = 1 }), "maxactive 1 on a tracepoint probe"},
		{"maxactive 4097", edit(asm(exit...), func(m *Module) { m.Probes[0].Kind, m.Probes[0].MaxActive = ProbeRetprobe, 4097 }),
			"maxactive 4097 outside 1..4096"},
		{"push field in an offset probe", edit(asm(field(0)...), func(m *Module) { m.Fields = []string{"pid"} }),
			"push field in an offset probe: only a tracepoint probe has an event to read"},
		{"push field in a retprobe", edit(asm(field(0)...), func(m *Module) { m.Probes[0].Kind, m.Fields = ProbeRetprobe, []string{"pid"} }),
			"push field in a retprobe:"},
		{"push field past the table", tp(field(1), "pid"), "push field 1: the module has 1 field names"},
		{"push field without a table", tp(field(0)), "push field 0: the module has 0 field names"},
		{"push field 65535", tp(field(0xffff), "pid"), "push field 65535"},
		{"watch without length", edit(watch(exit...), func(m *Module) { m.Probes[0].WatchLen = 0 }), "watch length 0: must be 1, 2, 4 or 8"},
		{"watch length 3", edit(watch(exit...), func(m *Module) { m.Probes[0].WatchLen = 3 }), "watch length 3: must be 1, 2, 4 or 8"},
		{"watch length 16", edit(watch(exit...), func(m *Module) { m.Probes[0].WatchLen = 16 }), "watch length 16"},
		{"watch length 8 on i386", edit(watch(exit...), func(m *Module) { m.Arch = ArchI386 }), "watch length 8 on i386"},
		{"watch without mode", edit(watch(exit...), func(m *Module) { m.Probes[0].WatchMode = 0 }), "watch mode 0: must be w (1) or rw (3)"},
		{"watch mode 2", edit(watch(exit...), func(m *Module) { m.Probes[0].WatchMode = 2 }), "watch mode 2"},
		{"watch misaligned", edit(watch(exit...), func(m *Module) { m.Probes[0].Loc.Addr = 0x1004 }), "watch address 0x1004 is not a multiple of its length 8"},
		{"watch on a line", edit(watch(exit...), func(m *Module) { m.Probes[0].Loc = Location{Text: "a.c:1", Kind: LocLine, File: "a.c", Line: 1} }),
			"watch probe on a source line"},
		{"watch on a tracepoint", edit(watch(exit...), func(m *Module) { m.Probes[0].Loc = Location{Text: "a:b", Kind: LocTracepoint} }),
			"a watch probe with a tracepoint location"},
		{"watch opcode", edit(watch(exit...), func(m *Module) { m.Probes[0].HasOpcode = true }), "opcode check on a watch probe"},
		{"watch logonfault", edit(watch(exit...), func(m *Module) { m.Probes[0].LogOnFault = true }), "logonfault on a watch probe"},
		{"watch maxactive", edit(watch(exit...), func(m *Module) { m.Probes[0].MaxActive = 2 }), "maxactive 2 on a watch probe"},
		{"watch length on an offset probe", edit(asm(exit...), func(m *Module) { m.Probes[0].WatchLen = 4 }),
			"watch length 4 and mode 0 on an offset probe: only a watch probe has them"},
		{"watch mode on a retprobe", edit(asm(exit...), func(m *Module) { m.Probes[0].Kind, m.Probes[0].WatchMode = ProbeRetprobe, WatchWrite }),
			"watch length 0 and mode 1 on a retprobe"},
		{"push iv 8", asm(cat(OpPushIV, 8, OpPop, exit)...), "push iv,8: index outside 0..7"},
		{"pop iv 255", asm(cat(OpPopIV, 255, exit)...), "pop iv,255: index outside 0..7"},
		{"push iv in a tracepoint", tp(cat(OpPushIV, 0, OpPop, exit)), "push iv in a tracepoint probe: only a probe in a call"},
		{"pop iv in a watch", watch(cat(OpPopIV, 7, exit)...), "pop iv in a watch probe"},
		{"enable truncated", asm(cat(OpEnable, 3)...), "enable: operands run past the end"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(c.m)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
			var ve *VerifyError
			if !errors.As(err, &ve) || ve.Probe != 0 {
				t.Errorf("%#v: the error does not name probe 0", err)
			}
		})
	}
	for _, c := range []struct {
		name   string
		fields []string
		want   string
	}{
		{"empty field name", []string{"pid", ""}, `field name 1 "" is not an identifier`},
		{"dotted field name", []string{"a.b"}, `field name 0 "a.b" is not an identifier`},
		{"field name from a digit", []string{"9x"}, `"9x" is not an identifier`},
		{"field name with a control byte", []string{"x\x1b[2J"}, `"x\x1b[2J" is not an identifier`},
		{"field name twice", []string{"pid", "comm", "pid"}, `field name "pid" given twice (entries 0 and 2)`},
		{"too many field names", make([]string, MaxFields+1), "65536 field names, at most 65535"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(tp(exit, c.fields...))
			var ve *VerifyError
			if err == nil || !strings.Contains(err.Error(), c.want) || !errors.As(err, &ve) || ve.Probe != -1 {
				t.Fatalf("got %v, want %q for the module", err, c.want)
			}
		})
	}
}

// watch turns asm's program into a watch probe of 8 bytes at 0x1000.
func watch(code ...byte) *Module {
	m := asm(code...)
	m.Probes[0].Kind, m.Probes[0].WatchLen, m.Probes[0].WatchMode = ProbeWatch, 8, WatchReadWrite
	return m
}

func TestVerifierAcceptsKinds(t *testing.T) {
	code := cat(OpPushField, 1, 0, OpPushField, 0, 0, OpLogN, 2, OpExit, 1)
	m := tracepointProbe(asm(code...), "prev_pid", "next_pid")
	p, err := Load(m)
	if err != nil {
		t.Fatalf("%+v", err)
	}
	if n := p.StaticStack(0); !n.Static || n.NeedZero != 0 {
		t.Errorf("stack layout %+v", n)
	}
	if r, d, w := StackEffect(p.Insn(0)); r != 0 || d != 1 || w != 1 {
		t.Errorf("StackEffect(push field) = %d, %d, %d", r, d, w)
	}
	ret := asm(cat(OpPushR, 0, 0, OpLogN, 1, OpExit, 1)...)
	ret.Probes[0].Kind, ret.Probes[0].MaxActive = ProbeRetprobe, MaxMaxActive
	if _, err := Load(ret); err != nil {
		t.Errorf("retprobe: %v", err)
	}
	ret.Probes[0].MaxActive = 0 // the default
	if _, err := Load(ret); err != nil {
		t.Errorf("retprobe: %v", err)
	}
	// watch probes of every length and mode, disabled probes of every
	// kind, enable and disable of any minor, iv in offset probes and
	// retprobes
	for _, n := range []uint8{1, 2, 4, 8} {
		for _, mode := range []WatchMode{WatchWrite, WatchReadWrite} {
			w := watch(cat(OpEnable, 0xff, 0xff, OpDisable, 0, 0, OpExit, 1)...)
			w.Probes[0].WatchLen, w.Probes[0].WatchMode, w.Probes[0].Disabled = n, mode, true
			if _, err := Load(w); err != nil {
				t.Errorf("watch %d %s: %v", n, mode, err)
			}
		}
	}
	w := watch(cat(OpExit, 1)...)
	w.Probes[0].Loc = Location{Text: "jiffies", Kind: LocExpr, Sum: Sum{Terms: []Term{{Kind: TermSymbol, Factor: 1, Name: "jiffies"}}}, Addr: 0x1003, Resolved: true}
	if _, err := Load(w); err != nil {
		t.Errorf("a symbolic watch address is checked at insert: %v", err)
	}
	for _, k := range []ProbeKind{ProbeOffset, ProbeRetprobe} {
		m := asm(cat(OpPushIV, 7, OpPopIV, 0, OpPushD, make([]byte, 8), OpPopIV, 3, OpExit, 1)...)
		m.Probes[0].Kind, m.Probes[0].Disabled = k, true
		p, err := Load(m)
		if err != nil {
			t.Fatalf("iv in %s: %v", k, err)
		}
		if n := p.StaticStack(0); !n.Static || n.NeedZero != 0 {
			t.Errorf("iv in %s: stack layout %+v", k, n)
		}
		for i, want := range [][3]int{{0, 1, 1}, {1, -1, 0}, {0, 1, 1}, {1, -1, 0}} {
			if r, d, w := StackEffect(p.Insn(i)); [3]int{r, d, w} != want {
				t.Errorf("StackEffect(%s) = %d, %d, %d, want %v", p.Insn(i).Op, r, d, w, want)
			}
		}
	}
	tp := tracepointProbe(asm(cat(OpEnable, 1, 0, OpExit, 1)...))
	tp.Probes[0].Disabled = true
	p, err = Load(tp)
	if err != nil {
		t.Fatalf("a disabled tracepoint enabling minor 1: %v", err)
	}
	if r, d, w := StackEffect(p.Insn(0)); r != 0 || d != 0 || w != 0 {
		t.Errorf("StackEffect(enable) = %d, %d, %d", r, d, w)
	}
}

func TestVerifierAccepts(t *testing.T) {
	m := asm(cat(OpPushD, make([]byte, 8), OpJz, u32(14), OpNop, OpExit, 1)...)
	m.Relocs = []Reloc{{Off: 1, Expr: "jiffies"}}
	m.Lines = []LineEntry{{PC: 0, Pos: Pos{Line: 3}}, {PC: 9, Pos: Pos{Line: 4}}}
	p, err := Load(m)
	if err != nil {
		t.Fatalf("%+v", err)
	}
	if len(p.code) != 4 || p.code[1].c != 2 {
		t.Errorf("decoded %+v", p.code)
	}
}
