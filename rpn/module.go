package rpn

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gprobes/gprobes/internal/escape"
)

// Arch is the architecture of the probed code; it fixes the word width of
// the stack and which register names exist.
type Arch uint8

const (
	ArchX86_64 Arch = iota // 64-bit words
	ArchI386               // 32-bit words
)

func (a Arch) String() string {
	switch a {
	case ArchX86_64:
		return "x86_64"
	case ArchI386:
		return "i386"
	}
	return fmt.Sprintf("arch(%d)", uint8(a))
}

// WordSize is the width of a stack entry in bytes.
func (a Arch) WordSize() int {
	if a == ArchI386 {
		return 4
	}
	return 8
}

// ModType says whether a module is user or kernel code.
type ModType uint8

const (
	ModUser ModType = iota
	ModKernel
)

func (m ModType) String() string {
	switch m {
	case ModUser:
		return "user"
	case ModKernel:
		return "kernel"
	}
	return fmt.Sprintf("modtype(%d)", uint8(m))
}

// Limits of the header keywords (docs/language.md, "Header keywords").
const (
	MaxJmpMax    = 65535
	MaxLogMax    = 65536
	MaxVars      = 256
	MaxGVars     = 256
	MaxFacility  = 4 // exit facilities 0..4
	StackSize    = 32
	MaxCallDepth = 32

	DefaultJmpMax   = 65535
	DefaultLogMax   = 1024
	DefaultDfltExit = 1
)

// Limits of a module's text and tables: what a PPDF can hold (the ppdf
// package's limits are these). The compiler refuses a DPDF past them with
// a positioned error, so that check and build agree.
const (
	MaxText    = 1 << 16 // bytes of the module name, a location, a source file name, a relocation's expression
	MaxFiles   = 65535   // source files: the DPDF and the files it includes (the PPDF's count is a u16)
	MaxBuildID = 1024    // bytes of build ID (GNU ld writes 16 or 20)
)

// Exit facilities.
const (
	ExitNone     = 0 // nothing committed
	ExitLog      = 1 // commit to the log stream
	ExitTrace    = 2 // commit as a trace event
	ExitDump     = 3 // dump, then commit
	ExitDebugger = 4 // hand the stopped target to a debugger, then commit
)

// Header holds the module keywords of a DPDF.
type Header struct {
	Name     string // probed module: path for user code, vmlinux/kernel or a kernel module name
	ModType  ModType
	Major    uint16
	JmpMax   uint32 // 1..MaxJmpMax
	LogMax   uint32 // 1..MaxLogMax
	DfltExit uint8  // 0..MaxFacility
	Vars     uint16 // 0..MaxVars
	GVars    uint16 // 0..MaxGVars
	Arch     Arch
}

// LocKind says how a probe location was written.
type LocKind uint8

const (
	LocExpr       LocKind = iota // constant expression, possibly with symbols: "do_fork+0x1c", "0xffffffff81000000"
	LocLine                      // source line "fs/open.c:1234", resolved through DWARF
	LocAbsolute                  // constant expression without symbols: an address as written
	LocTracepoint                // a kernel static tracepoint "SUBSYS:EVENT" (Text), kind ProbeTracepoint
	LocUSDT                      // a user static probe "PROVIDER:NAME" (Text) of the file's .note.stapsdt, kind ProbeUSDT
)

func (k LocKind) String() string {
	switch k {
	case LocExpr:
		return "symbolic"
	case LocLine:
		return "line"
	case LocAbsolute:
		return "absolute"
	case LocTracepoint:
		return "tracepoint"
	case LocUSDT:
		return "usdt"
	}
	return fmt.Sprintf("lockind(%d)", uint8(k))
}

// Location is where a probe goes: as written, for people; as data, for
// the engine (Sum for LocExpr, File and Line for LocLine, Addr for
// LocAbsolute); and, when symbols were available at build time, as
// resolved. A resolved address is a link-time address of the module (the
// value in its symbol table); the engine adds the load bias or KASLR slide
// when it inserts the probe.
type Location struct {
	Text     string // as written (after preprocessing): "do_fork+0x1c", "fs/open.c:1234"
	Kind     LocKind
	Sum      Sum    // LocExpr: the symbols and constants it adds up to
	File     string // LocLine: the source file, as written
	Line     uint32 // LocLine: the line, from 1
	Addr     uint64
	Resolved bool
}

func (l Location) String() string {
	if l.Resolved && l.Kind != LocAbsolute {
		return fmt.Sprintf("%s (%#x)", l.Text, l.Addr)
	}
	return l.Text
}

// ProbeKind is what makes a probe's program run (docs/language.md, "Probe
// kinds"): the keyword its
// definition starts with.
type ProbeKind uint8

const (
	ProbeOffset     ProbeKind = iota // offset = LOC: before the instruction at LOC
	ProbeRetprobe                    // retprobe = SYMBOL: when a call of the function returns
	ProbeTracepoint                  // tracepoint = SUBSYS:EVENT: at a kernel static tracepoint
	ProbeWatch                       // watch = EXPR,LEN,MODE: right after an instruction accessed the watched bytes
	ProbeUSDT                        // usdt = PROVIDER:NAME: at a user static probe (sys/sdt.h) of the module's file
)

func (k ProbeKind) String() string {
	switch k {
	case ProbeOffset:
		return "offset"
	case ProbeRetprobe:
		return "retprobe"
	case ProbeTracepoint:
		return "tracepoint"
	case ProbeWatch:
		return "watch"
	case ProbeUSDT:
		return "usdt"
	}
	return fmt.Sprintf("probekind(%d)", uint8(k))
}

// DefaultMaxActive is a retprobe's maxactive when not given: the calls
// tracked at once per thread (docs/language.md, retprobe).
const DefaultMaxActive = 64

// Limits of the probe kinds' data (docs/language.md, "Probe kinds").
const (
	MaxMaxActive = 4096  // a retprobe's maxactive: 1..MaxMaxActive
	MaxFields    = 65535 // distinct field names in Module.Fields (OpPushField's operand is a u16)
	MaxUSDTArgs  = 12    // push arg,N: N in 1..MaxUSDTArgs (sys/sdt.h's probes take at most 12 arguments)
)

// SplitTracepoint splits a tracepoint location "SUBSYS:EVENT" (Location.Text
// of a LocTracepoint) into its two names, and reports whether text has that
// form: two non-empty names of ASCII letters, digits and '_' around one
// ':'. Every tracepoint location that passed the verifier has it, so a
// target may use the names in paths (tracefs's events/SUBSYS/EVENT).
func SplitTracepoint(text string) (subsys, event string, ok bool) {
	if _, msg := CheckTracepoint(text); msg != "" {
		return "", "", false
	}
	subsys, event, _ = strings.Cut(text, ":")
	return subsys, event, true
}

// CheckTracepoint says what is wrong with a tracepoint location, and at
// which byte of text, or "" when it is SUBSYS:EVENT.
func CheckTracepoint(text string) (at int, msg string) {
	colon := strings.IndexByte(text, ':')
	if colon < 0 {
		return 0, "no ':' between the subsystem and the event"
	}
	if colon == 0 {
		return 0, "the subsystem before ':' is empty"
	}
	if colon == len(text)-1 {
		return colon, "the event after ':' is empty"
	}
	for i := 0; i < len(text); i++ {
		if c := text[i]; i != colon && !isWordByte(c) {
			if c == ':' {
				return i, "more than one ':'"
			}
			what := fmt.Sprintf("byte %#02x", c)
			if r, n := utf8.DecodeRuneInString(text[i:]); r != utf8.RuneError || n > 1 {
				what = strconv.QuoteRune(r)
			}
			return i, what + " cannot be in a subsystem or event name (ASCII letters, digits and _ only)"
		}
	}
	return 0, ""
}

// ValidFieldName reports whether name can be a tracepoint field name, an
// entry of Module.Fields: a C identifier (an ASCII letter or '_', then
// letters, digits and '_'), case as the kernel spells it.
func ValidFieldName(name string) bool {
	if name == "" || name[0] >= '0' && name[0] <= '9' {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !isWordByte(name[i]) {
			return false
		}
	}
	return true
}

func isWordByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// WatchMode is what accesses a watch probe fires on.
type WatchMode uint8

const (
	WatchWrite     WatchMode = 1 // w: writes
	WatchReadWrite WatchMode = 3 // rw: reads and writes (x86 debug registers have no read-only mode)
)

func (m WatchMode) String() string {
	switch m {
	case WatchWrite:
		return "w"
	case WatchReadWrite:
		return "rw"
	}
	return fmt.Sprintf("watchmode(%d)", uint8(m))
}

// MaxIV is the number of instance variables of a call (push iv,I and pop
// iv,I with I in 0..MaxIV-1).
const MaxIV = 8

// MaxStackFrames bounds log ustack,N and log kstack,N (N in
// 1..MaxStackFrames); DefaultStackFrames is N when it is not given. A
// stack is logged as N 8-byte words, the frames' addresses innermost
// first, zeros after the last frame found.
const (
	MaxStackFrames     = 64
	DefaultStackFrames = 16
)

// Probe is one probe definition: its kind, location, identity, limits and
// the entry point of its program in Module.Code.
type Probe struct {
	Kind ProbeKind
	// Format is how a person reads its records (format = "..."):
	// printf-like over the logged words and strings (FormatValues); ""
	// for none
	Format    string
	MaxActive uint32 // ProbeRetprobe: calls tracked at once per thread, 1..MaxMaxActive; 0 = DefaultMaxActive
	// ProbeWatch: the watched address is Loc (an expression, LocExpr or
	// LocAbsolute), WatchLen bytes (1, 2, 4 or 8; the address a multiple
	// of it), on WatchMode accesses
	WatchLen  uint8
	WatchMode WatchMode
	// Disabled: "enabled = no", inserted switched off (enable MINOR, or
	// gprobes enable, switches it on)
	Disabled   bool
	Loc        Location
	HasOpcode  bool
	Opcode     uint8 // expected byte at the location
	Minor      uint16
	PassCount  uint64 // the first PassCount hits run nothing
	MaxHits    uint64 // 0 = unlimited
	LogOnFault bool
	// AutoStack: "autostacktrace = yes" (the probe's, else its module
	// header's): every exception record of the probe carries the stack
	// at the hit, DefaultStackFrames frames, the user stack in a
	// process, the kernel stack in a kernel
	AutoStack bool
	Entry     uint32 // byte offset of the program in Module.Code
	End       uint32 // byte offset just past the program
	Pos       Pos    // the line that starts the probe (offset, retprobe, tracepoint) in the DPDF
}

// ProbeAt returns the index of the probe whose program holds the byte
// at offset off of Code, or -1 when none does. A program's jumps and
// calls stay in its probe's range: what is there is that probe's alone.
func (m *Module) ProbeAt(off uint32) int {
	for i := range m.Probes {
		if p := &m.Probes[i]; off >= p.Entry && off < p.End {
			return i
		}
	}
	return -1
}

// ActiveLimit is a retprobe's maxactive, DefaultMaxActive when not given.
func (p *Probe) ActiveLimit() uint32 {
	if p.MaxActive == 0 {
		return DefaultMaxActive
	}
	return p.MaxActive
}

// Pos is a source position: an index into Module.Files, a line and a column.
type Pos struct {
	File uint16
	Line uint32
	Col  uint32
}

// LineEntry maps the instruction at PC (a byte offset in Module.Code) and
// the ones after it, up to the next entry, to a DPDF source position.
type LineEntry struct {
	PC  uint32
	Pos Pos
}

// Reloc marks a PUSH D immediate whose value depends on symbols or types
// (an address or a struct layout). The engine evaluates Sum at insert time
// against the live target and patches the 8 bytes at Off; when that is
// impossible it uses Value (plus Sum.BiasFactor times the load bias) if
// Resolved.
type Reloc struct {
	Off      uint32 // byte offset of the 8-byte immediate in Module.Code
	Expr     string // the expression as written, for people
	Sum      Sum    // the expression as data, for the engine
	Value    uint64 // the value at build time, against link-time addresses
	Resolved bool
}

// Module is a compiled DPDF: what a PPDF file stores and what the engine
// inserts. Code holds the bytecode of every probe, concatenated; it is
// untrusted until Load has verified it.
type Module struct {
	Header
	Probes  []Probe
	Code    []byte
	Lines   []LineEntry // sorted by PC
	Files   []string    // source files named by Pos.File; Files[0] is the DPDF itself
	Relocs  []Reloc     // sorted by Off
	BuildID []byte      // ELF build ID of the probed module when known at build time
	// Fields are the tracepoint field names "push field,NAME" refers to,
	// by index (OpPushField's operand); the event is its probe's. Each is
	// a ValidFieldName, each once, in order of first use; at most
	// MaxFields.
	Fields []string
}

// PosString formats p as file:line:col using the module's file table,
// with the file name escaped for a terminal (escape.String).
func (m *Module) PosString(p Pos) string {
	f := "?"
	if int(p.File) < len(m.Files) {
		f = escape.String(m.Files[p.File])
	}
	if p.Col == 0 {
		return fmt.Sprintf("%s:%d", f, p.Line)
	}
	return fmt.Sprintf("%s:%d:%d", f, p.Line, p.Col)
}

// LineFor returns the source position of the instruction at byte offset pc.
func (m *Module) LineFor(pc uint32) (Pos, bool) {
	lo, hi := 0, len(m.Lines)
	for lo < hi {
		mid := (lo + hi) / 2
		if m.Lines[mid].PC <= pc {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == 0 {
		return Pos{}, false
	}
	return m.Lines[lo-1].Pos, true
}

// USDTWords says a CheckTracepoint message of a usdt location in its
// words: provider and name, not subsystem and event.
func USDTWords(msg string) string {
	return strings.NewReplacer("subsystem or event name", "provider or probe name", "subsystem", "provider", "event", "name").Replace(msg)
}
