package gdbremote

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// RegInfo is one register of the stub's layout.
type RegInfo struct {
	Name    string // as the target description spells it: "rip", "eflags", "fs_base"
	Bitsize int
	Regnum  int    // the number p and P use
	Offset  int    // byte offset in a g block; the g block holds the registers in regnum order
	Type    string // "int64", "code_ptr", "i387_ext", ... ("" when unknown)
	Group   string // "general", "float", "system", ... ("" when unknown)
	Feature string // the feature it came from: "org.gnu.gdb.i386.core"
}

// Registers returns the stub's register layout, in regnum order.
func (c *Conn) Registers() []RegInfo {
	return append([]RegInfo(nil), c.regs...)
}

// Reg finds a register of the layout by name (case-insensitive; "rflags"
// and "eflags" name the same register).
func (c *Conn) Reg(name string) (RegInfo, bool) {
	i, ok := c.regIdx[strings.ToLower(name)]
	if !ok {
		return RegInfo{}, false
	}
	return c.regs[i], true
}

func (c *Conn) setLayout(regs []RegInfo, arch string) {
	sort.SliceStable(regs, func(i, j int) bool { return regs[i].Regnum < regs[j].Regnum })
	off := 0
	idx := make(map[string]int, len(regs)+2)
	for i := range regs {
		regs[i].Offset = off
		off += regs[i].Bitsize / 8
		idx[strings.ToLower(regs[i].Name)] = i
	}
	for a, b := range map[string]string{"rflags": "eflags", "eflags": "rflags"} {
		if _, ok := idx[a]; !ok {
			if i, ok := idx[b]; ok {
				idx[a] = i
			}
		}
	}
	c.regs, c.regIdx, c.arch = regs, idx, arch
}

// defaultAMD64 is the x86_64 layout of QEMU's stub without a target
// description (target/i386/gdbstub.c): gdb's amd64 core registers, then the
// system registers QEMU inserts before the FPU. gdbsx sends the core
// registers (up to gs) only, which this layout reads the same way.
func defaultAMD64() []RegInfo {
	var regs []RegInfo
	add := func(bits int, typ, group, feature string, names ...string) {
		for _, n := range names {
			regs = append(regs, RegInfo{Name: n, Bitsize: bits, Regnum: len(regs), Type: typ, Group: group, Feature: feature})
		}
	}
	const core, sse, sys = "org.gnu.gdb.i386.core", "org.gnu.gdb.i386.sse", "org.qemu.gdb.i386.sys"
	add(64, "int64", "general", core, "rax", "rbx", "rcx", "rdx", "rsi", "rdi")
	add(64, "data_ptr", "general", core, "rbp", "rsp")
	add(64, "int64", "general", core, "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15")
	add(64, "code_ptr", "general", core, "rip")
	add(32, "i386_eflags", "general", core, "eflags")
	add(32, "int32", "general", core, "cs", "ss", "ds", "es", "fs", "gs")
	add(64, "int64", "system", sys, "fs_base", "gs_base", "k_gs_base", "cr0", "cr2", "cr3", "cr4", "cr8", "efer")
	add(80, "i387_ext", "float", core, "st0", "st1", "st2", "st3", "st4", "st5", "st6", "st7")
	add(32, "int", "float", core, "fctrl", "fstat", "ftag", "fiseg", "fioff", "foseg", "fooff", "fop")
	add(128, "vec128", "sse", sse, "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",
		"xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15")
	add(32, "i386_mxcsr", "vector", sse, "mxcsr")
	return regs
}

// readTargetDescription reads target.xml and what it includes.
func (c *Conn) readTargetDescription(ctx context.Context) error {
	regs, arch, err := parseTargetDescription(func(annex string) ([]byte, error) {
		return c.qXfer(ctx, "features", annex)
	})
	if err != nil {
		return err
	}
	c.setLayout(regs, arch)
	return nil
}

// parseTargetDescription reads the registers of target.xml, following
// xi:include through fetch. Registers are numbered in document order
// unless a regnum says otherwise (later ones continue from it).
func parseTargetDescription(fetch func(annex string) ([]byte, error)) ([]RegInfo, string, error) {
	var regs []RegInfo
	arch := ""
	next := 0
	seen := map[string]bool{}
	var load func(annex string, depth int) error
	load = func(annex string, depth int) error {
		if depth > 8 || seen[annex] {
			return fmt.Errorf("%s: include loop or too deep", annex)
		}
		seen[annex] = true
		doc, err := fetch(annex)
		if err != nil {
			return err
		}
		d := xml.NewDecoder(bytes.NewReader(doc))
		d.Strict = false
		feature := ""
		var text *string
		for {
			tok, err := d.Token()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return fmt.Errorf("%s: %v", annex, err)
			}
			switch t := tok.(type) {
			case xml.StartElement:
				attr := func(n string) string {
					for _, a := range t.Attr {
						if a.Name.Local == n {
							return a.Value
						}
					}
					return ""
				}
				switch t.Name.Local {
				case "include":
					if href := attr("href"); href != "" {
						if err := load(href, depth+1); err != nil {
							return err
						}
					}
				case "feature":
					feature = attr("name")
				case "architecture":
					text = &arch
				case "reg":
					if len(regs) >= 4096 {
						return fmt.Errorf("%s: more than 4096 registers", annex)
					}
					r := RegInfo{Name: attr("name"), Type: attr("type"), Group: attr("group"), Feature: feature, Regnum: next}
					bits, err := strconv.Atoi(attr("bitsize"))
					if err != nil || bits <= 0 || bits%8 != 0 || bits > 4096 {
						return fmt.Errorf("%s: register %q: bad bitsize %q", annex, r.Name, attr("bitsize"))
					}
					r.Bitsize = bits
					if s := attr("regnum"); s != "" {
						n, err := strconv.Atoi(s)
						if err != nil || n < 0 || n > 1<<16 {
							return fmt.Errorf("%s: register %q: bad regnum %q", annex, r.Name, s)
						}
						r.Regnum = n
					}
					next = r.Regnum + 1
					regs = append(regs, r)
				}
			case xml.CharData:
				if text != nil {
					*text += strings.TrimSpace(string(t))
				}
			case xml.EndElement:
				text = nil
			}
		}
	}
	if err := load("target.xml", 0); err != nil {
		return nil, "", err
	}
	if len(regs) == 0 {
		return nil, "", errors.New("target.xml lists no registers")
	}
	return regs, arch, nil
}

// qXfer reads a whole object with qXfer:OBJECT:read:ANNEX:OFFSET,LENGTH.
func (c *Conn) qXfer(ctx context.Context, object, annex string) ([]byte, error) {
	var out []byte
	chunk := c.packetSize - 16
	for {
		pkt := fmt.Sprintf("qXfer:%s:read:%s:%x,%x", object, annex, len(out), chunk)
		r, err := c.request(ctx, []byte(pkt))
		if err != nil {
			return nil, err
		}
		if r[0] != 'm' && r[0] != 'l' {
			return nil, c.packetErr([]byte(pkt), r, fmt.Errorf("unexpected reply %q", short(r)))
		}
		data, err := unescape(r[1:])
		if err != nil {
			return nil, c.packetErr([]byte(pkt), r, err)
		}
		out = append(out, data...)
		if r[0] == 'l' || len(data) == 0 {
			return out, nil
		}
		if len(out) > 1<<20 {
			return nil, fmt.Errorf("qXfer %s %s: longer than 1 MiB", object, annex)
		}
	}
}

// selectThread makes th the thread of g, G, p and P (Hg), unless it is
// already, or th is the zero Thread (the stub's current thread).
func (c *Conn) selectThread(ctx context.Context, th Thread) error {
	if th.ID == "" || th.ID == c.curG {
		return nil
	}
	if err := c.requestOK(ctx, append([]byte("Hg"), th.ID...)); err != nil {
		return err
	}
	c.curG = th.ID
	return nil
}

// ReadRegs returns the g block of a thread (Hg, then g): the registers in
// regnum order, each in target byte order, as Registers lays them out.
// Registers the stub sends as "xx" (unavailable) read as zeros. The block
// may end before the layout does: QEMU sends no AVX state, gdbsx only the
// core registers. The zero Thread means the stub's current thread (the
// one of the last stop), without an Hg.
func (c *Conn) ReadRegs(th Thread) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.readRegs(th)
}

func (c *Conn) readRegs(th Thread) ([]byte, error) {
	ctx := context.Background()
	if err := c.selectThread(ctx, th); err != nil {
		return nil, err
	}
	r, err := c.request(ctx, []byte("g"))
	if err != nil {
		return nil, err
	}
	out := make([]byte, len(r)/2)
	if _, err := decodeHex(out, r); err != nil {
		return nil, c.packetErr([]byte("g"), r, err)
	}
	return out, nil
}

// WriteRegs writes a whole g block back (Hg, then G).
func (c *Conn) WriteRegs(th Thread, block []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writeRegs(th, block)
}

func (c *Conn) writeRegs(th Thread, block []byte) error {
	ctx := context.Background()
	if err := c.selectThread(ctx, th); err != nil {
		return err
	}
	c.pbuf = appendHex(append(c.pbuf[:0], 'G'), block)
	return c.requestOK(ctx, c.pbuf)
}

// RegValue extracts a register of at most 64 bits from a g block,
// little-endian (x86).
func (c *Conn) RegValue(block []byte, name string) (uint64, error) {
	ri, err := c.reg64(name)
	if err != nil {
		return 0, err
	}
	n := ri.Bitsize / 8
	if ri.Offset+n > len(block) {
		return 0, fmt.Errorf("gdbremote: register %s is not in the %d-byte g block (offset %d)", ri.Name, len(block), ri.Offset)
	}
	return le(block[ri.Offset : ri.Offset+n]), nil
}

// SetRegValue stores a register of at most 64 bits into a g block.
func (c *Conn) SetRegValue(block []byte, name string, v uint64) error {
	ri, err := c.reg64(name)
	if err != nil {
		return err
	}
	n := ri.Bitsize / 8
	if ri.Offset+n > len(block) {
		return fmt.Errorf("gdbremote: register %s is not in the %d-byte g block (offset %d)", ri.Name, len(block), ri.Offset)
	}
	if err := fits(ri, v); err != nil {
		return err
	}
	putLE(block[ri.Offset:ri.Offset+n], v)
	return nil
}

func (c *Conn) reg64(name string) (RegInfo, error) {
	ri, ok := c.Reg(name)
	if !ok {
		return RegInfo{}, fmt.Errorf("gdbremote: the stub has no register %q", name)
	}
	if ri.Bitsize > 64 {
		return RegInfo{}, fmt.Errorf("gdbremote: register %s has %d bits, more than a uint64", ri.Name, ri.Bitsize)
	}
	return ri, nil
}

func fits(ri RegInfo, v uint64) error {
	if ri.Bitsize < 64 && v>>ri.Bitsize != 0 {
		return fmt.Errorf("gdbremote: %#x does not fit in the %d-bit register %s", v, ri.Bitsize, ri.Name)
	}
	return nil
}

func le(b []byte) uint64 {
	var buf [8]byte
	copy(buf[:], b)
	return binary.LittleEndian.Uint64(buf[:])
}

func putLE(b []byte, v uint64) {
	var buf [8]byte
	binary.LittleEndian.PutUint64(buf[:], v)
	copy(b, buf[:])
}

// ReadReg reads one register of at most 64 bits: with p when the stub has
// it, else from the g block.
func (c *Conn) ReadReg(th Thread, name string) (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ri, err := c.reg64(name)
	if err != nil {
		return 0, err
	}
	ctx := context.Background()
	if c.hasP >= 0 {
		if err := c.selectThread(ctx, th); err != nil {
			return 0, err
		}
		pkt := strconv.AppendUint(append(c.pbuf[:0], 'p'), uint64(ri.Regnum), 16)
		r, err := c.request(ctx, pkt)
		switch {
		case err == nil:
			c.hasP = 1
			var buf [8]byte
			n := ri.Bitsize / 8
			if len(r) != 2*n {
				return 0, c.packetErr(pkt, r, fmt.Errorf("%d hex digits for the %d-bit register %s", len(r), ri.Bitsize, ri.Name))
			}
			unavail, err := decodeHex(buf[:n], r)
			if err != nil {
				return 0, c.packetErr(pkt, r, err)
			}
			if unavail {
				return 0, c.packetErr(pkt, r, fmt.Errorf("register %s is unavailable", ri.Name))
			}
			return le(buf[:n]), nil
		case errors.Is(err, ErrUnsupported) && c.hasP == 0:
			c.hasP = -1
			c.logf("note: no p packet; registers come from g")
		default:
			return 0, err
		}
	}
	block, err := c.readRegs(th)
	if err != nil {
		return 0, err
	}
	return c.RegValue(block, name)
}

// WriteReg writes one register of at most 64 bits: with P when the stub
// has it, else by writing the g block back modified (G).
func (c *Conn) WriteReg(th Thread, name string, v uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ri, err := c.reg64(name)
	if err != nil {
		return err
	}
	if err := fits(ri, v); err != nil {
		return err
	}
	ctx := context.Background()
	if c.hasPW >= 0 {
		if err := c.selectThread(ctx, th); err != nil {
			return err
		}
		var buf [8]byte
		binary.LittleEndian.PutUint64(buf[:], v)
		pkt := strconv.AppendUint(append(c.pbuf[:0], 'P'), uint64(ri.Regnum), 16)
		pkt = appendHex(append(pkt, '='), buf[:ri.Bitsize/8])
		err := c.requestOK(ctx, pkt)
		switch {
		case err == nil:
			c.hasPW = 1
			return nil
		case errors.Is(err, ErrUnsupported) && c.hasPW == 0:
			c.hasPW = -1
			c.logf("note: no P packet; registers are written with G")
		default:
			return err
		}
	}
	block, err := c.readRegs(th)
	if err != nil {
		return err
	}
	if err := c.SetRegValue(block, name, v); err != nil {
		return err
	}
	return c.writeRegs(th, block)
}
