package guestcore

// File layout (ELF64, little-endian, x86_64, ET_CORE):
//
//	ELF header (64 bytes)
//	program headers (56 bytes each): PT_NOTE, then the PT_LOADs
//	notes: NT_PRSTATUS ("CORE", 336 bytes) per vCPU, then VMCOREINFO
//	        (name "VMCOREINFO", type 0, the guest's text) when given
//	page data, from the first 4096-byte boundary after the notes: each
//	        distinct frame once, in the order first met
//
// A PT_LOAD covers a run of pages that are contiguous both in the guest's
// virtual addresses and in the file; p_paddr is the guest-physical address
// when the range says it (Range.Phys), else 0.

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/internal/outfile"
	"github.com/gprobes/gprobes/rpn"
)

// PageSize is the size of a guest page.
const PageSize = 4096

// Memory is the guest's memory as the writer reads it.
type Memory interface {
	// Frame names the frame backing the page at va (a machine or
	// guest-physical frame number: only equality matters); ok is false
	// for a page that is not mapped (a hole of the core).
	Frame(va uint64) (frame uint64, ok bool, err error)
	// ReadFrame reads one frame's PageSize bytes.
	ReadFrame(frame uint64, p []byte) error
}

// BatchMemory is a Memory that reads many frames in one go (one mapping
// for a batch of frames): WriteFile uses it when the Memory has it.
type BatchMemory interface {
	Memory
	// ReadFrames reads len(frames) frames into p, PageSize bytes each.
	ReadFrames(frames []uint64, p []byte) error
}

// batch is how many frames WriteFile asks a BatchMemory for at once.
const batch = 256

// Range is a range of guest-virtual addresses to dump.
type Range struct {
	Name       string // for messages: "kernel image", "direct map"
	Start, End uint64 // page-aligned; End exclusive
	// Phys is the guest-physical address of Start when the range maps
	// physical memory linearly (HasPhys): PT_LOADs then carry p_paddr.
	Phys    uint64
	HasPhys bool
}

// VCPU is one vCPU's registers at the time of the dump.
type VCPU struct {
	ID   int // its index, written as pr_pid (gdb's "LWP")
	Regs engine.Regs
}

// Options say what to dump.
type Options struct {
	Ranges []Range
	VCPUs  []VCPU // the one that hit first
	// VMCoreInfo is the guest kernel's vmcoreinfo text (KEY=VALUE lines),
	// written as a VMCOREINFO note for crash and makedumpfile.
	VMCoreInfo []byte
	// MaxBytes refuses a core larger than this (0: no limit).
	MaxBytes int64
}

// Stats describe a core written.
type Stats struct {
	Pages    int   // pages dumped (PT_LOAD coverage)
	Frames   int   // distinct frames written
	Zero     int   // frames of zeros left as holes
	Unmapped int   // pages of the ranges not mapped
	Loads    int   // PT_LOAD segments
	Size     int64 // file size
}

// ErrTooBig is returned (wrapped) when the core would exceed MaxBytes.
var ErrTooBig = errors.New("the core would be larger than the limit")

const (
	ehdrSize  = 64
	phdrSize  = 56
	ptLoad    = 1
	ptNote    = 4
	etCore    = 4
	emX86_64  = 62
	pfR       = 4
	pfW       = 2
	pfX       = 1
	ntPRSTAT  = 1
	prstatLen = 336
)

type load struct {
	va, pa, off, size uint64
}

// Plan is the layout of a core: decided before anything is written.
type plan struct {
	loads  []load
	frames []uint64 // file order
	notes  []byte
	data   uint64 // file offset of the first frame
}

func (o *Options) notes() []byte {
	var b []byte
	add := func(name string, typ uint32, desc []byte) {
		var h [12]byte
		binary.LittleEndian.PutUint32(h[0:], uint32(len(name)+1))
		binary.LittleEndian.PutUint32(h[4:], uint32(len(desc)))
		binary.LittleEndian.PutUint32(h[8:], typ)
		b = append(b, h[:]...)
		b = append(b, name...)
		b = append(b, 0)
		b = pad4(b)
		b = append(b, desc...)
		b = pad4(b)
	}
	for _, c := range o.VCPUs {
		add("CORE", ntPRSTAT, prstatus(c))
	}
	if len(o.VMCoreInfo) > 0 {
		add("VMCOREINFO", 0, o.VMCoreInfo)
	}
	return b
}

func pad4(b []byte) []byte {
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// prstatus is struct elf_prstatus of x86_64 with the vCPU's registers in
// pr_reg (struct user_regs_struct order).
func prstatus(c VCPU) []byte {
	b := make([]byte, prstatLen)
	binary.LittleEndian.PutUint32(b[32:], uint32(c.ID+1)) // pr_pid: gdb's LWP, not 0
	r := &c.Regs
	order := []uint64{
		r[rpn.RegR15], r[rpn.RegR14], r[rpn.RegR13], r[rpn.RegR12], r[rpn.RegRBP], r[rpn.RegRBX],
		r[rpn.RegR11], r[rpn.RegR10], r[rpn.RegR9], r[rpn.RegR8], r[rpn.RegRAX], r[rpn.RegRCX],
		r[rpn.RegRDX], r[rpn.RegRSI], r[rpn.RegRDI], ^uint64(0), /* orig_rax */
		r[rpn.RegRIP], r[rpn.RegCS], r[rpn.RegRFLAGS], r[rpn.RegRSP], r[rpn.RegSS],
		r[rpn.RegFSBase], r[rpn.RegGSBase], r[rpn.RegDS], r[rpn.RegES], r[rpn.RegFS], r[rpn.RegGS],
	}
	for i, v := range order {
		binary.LittleEndian.PutUint64(b[112+8*i:], v)
	}
	return b
}

func (o *Options) plan(mem Memory, st *Stats) (*plan, error) {
	p := &plan{notes: o.notes()}
	seen := map[uint64]uint64{} // frame -> file offset, relative to data
	var next uint64
	for _, r := range o.Ranges {
		if r.Start%PageSize != 0 || r.End%PageSize != 0 || r.End < r.Start {
			return nil, fmt.Errorf("range %s %#x-%#x: not page-aligned", r.Name, r.Start, r.End)
		}
		var cur *load
		for va := r.Start; va < r.End; va += PageSize {
			f, ok, err := mem.Frame(va)
			if err != nil {
				return nil, fmt.Errorf("%s at %#x: %w", r.Name, va, err)
			}
			if !ok {
				st.Unmapped++
				cur = nil
				continue
			}
			off, dup := seen[f]
			if !dup {
				off = next
				next += PageSize
				seen[f] = off
				p.frames = append(p.frames, f)
			}
			st.Pages++
			if cur != nil && cur.va+cur.size == va && cur.off+cur.size == off {
				cur.size += PageSize
				continue
			}
			l := load{va: va, off: off, size: PageSize}
			if r.HasPhys {
				l.pa = r.Phys + (va - r.Start)
			}
			p.loads = append(p.loads, l)
			cur = &p.loads[len(p.loads)-1]
		}
	}
	if len(p.loads)+1 >= 0xffff {
		// PN_XNUM would need a section header; a guest's mappings are
		// far fewer runs than that
		return nil, fmt.Errorf("%d PT_LOAD segments: too many for an ELF header", len(p.loads))
	}
	head := uint64(ehdrSize + phdrSize*(1+len(p.loads)))
	p.data = alignUp(head+uint64(len(p.notes)), PageSize)
	st.Loads = len(p.loads)
	st.Frames = len(p.frames)
	st.Size = int64(p.data + next)
	if o.MaxBytes > 0 && st.Size > o.MaxBytes {
		return nil, fmt.Errorf("%w: %d MiB (%d pages), limit %d MiB", ErrTooBig, st.Size>>20, st.Frames, o.MaxBytes>>20)
	}
	return p, nil
}

func alignUp(v, a uint64) uint64 { return (v + a - 1) &^ (a - 1) }

// WriteFile writes the core to path, a new file: into a temporary file in
// the same folder, given its name once complete (a failed dump leaves no
// file). Nothing that stands at path is replaced or followed: the dump
// fails instead (internal/outfile's CreateNew).
func WriteFile(path string, mem Memory, opts Options) (Stats, error) {
	var st Stats
	p, err := opts.plan(mem, &st)
	if err != nil {
		return st, err
	}
	out, err := outfile.CreateNew(path, 0o600)
	if err != nil {
		return st, err
	}
	f := out.OS()
	ok := false
	defer func() {
		if !ok {
			out.Abort()
		}
	}()
	if err := f.Truncate(st.Size); err != nil { // holes where nothing is written
		return st, err
	}
	if _, err := f.WriteAt(p.header(), 0); err != nil {
		return st, err
	}
	bm, _ := mem.(BatchMemory)
	buf := make([]byte, batch*PageSize)
	for i := 0; i < len(p.frames); i += batch {
		frames := p.frames[i:min(i+batch, len(p.frames))]
		data := buf[:len(frames)*PageSize]
		if bm != nil {
			if err := bm.ReadFrames(frames, data); err != nil {
				return st, fmt.Errorf("read frames %#x...: %w", frames[0], err)
			}
		} else {
			for j, fr := range frames {
				if err := mem.ReadFrame(fr, data[j*PageSize:(j+1)*PageSize]); err != nil {
					return st, fmt.Errorf("read frame %#x: %w", fr, err)
				}
			}
		}
		for j := range frames {
			page := data[j*PageSize : (j+1)*PageSize]
			if zero(page) {
				st.Zero++
				continue
			}
			if _, err := f.WriteAt(page, int64(p.data)+int64(i+j)*PageSize); err != nil {
				return st, err
			}
		}
	}
	ok = true // Commit removes the temporary file if it fails
	return st, out.Commit()
}

func zero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// header is the ELF header, the program headers and the notes.
func (p *plan) header() []byte {
	le := binary.LittleEndian
	n := 1 + len(p.loads)
	b := make([]byte, ehdrSize+phdrSize*n, ehdrSize+phdrSize*n+len(p.notes))
	copy(b, []byte{0x7f, 'E', 'L', 'F', 2 /* 64-bit */, 1 /* LE */, 1 /* version */})
	le.PutUint16(b[16:], etCore)
	le.PutUint16(b[18:], emX86_64)
	le.PutUint32(b[20:], 1)
	le.PutUint64(b[32:], ehdrSize) // e_phoff
	le.PutUint16(b[52:], ehdrSize)
	le.PutUint16(b[54:], phdrSize)
	le.PutUint16(b[56:], uint16(n)) // below PN_XNUM: plan checks
	ph := func(i int, typ, flags uint32, off, va, pa, size, align uint64) {
		h := b[ehdrSize+phdrSize*i:]
		le.PutUint32(h[0:], typ)
		le.PutUint32(h[4:], flags)
		le.PutUint64(h[8:], off)
		le.PutUint64(h[16:], va)
		le.PutUint64(h[24:], pa)
		le.PutUint64(h[32:], size)
		le.PutUint64(h[40:], size)
		le.PutUint64(h[48:], align)
	}
	ph(0, ptNote, 0, uint64(ehdrSize+phdrSize*n), 0, 0, uint64(len(p.notes)), 4)
	for i, l := range p.loads {
		ph(1+i, ptLoad, pfR|pfW|pfX, p.data+l.off, l.va, l.pa, l.size, PageSize)
	}
	return append(b, p.notes...)
}
