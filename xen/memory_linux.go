package xen

// translate finds an address in the page tables of a stopped vCPU: the
// one whose registers the engine read last (t.cur: the engine reads a
// thread's registers first thing at each of its stops, so a probe's
// memory reads at a hit go through the page tables of the vCPU that hit,
// the address space of the task that runs there, as a GDB stub's memory
// follows the thread selected last). Kernel addresses are the same in
// every vCPU's tables.
func (t *Target) translate(va uint64) (Translation, error) {
	ctx, err := t.context(t.cur)
	for v := 0; err != nil && v < t.vcpus; v++ {
		ctx, err = t.context(v) // offline: another vCPU's tables
	}
	if err != nil {
		return Translation{}, err
	}
	key := tlbKey{ctx.CR(3), va &^ 0xfff}
	if tr, ok := t.tlb[key]; ok {
		return tr, nil
	}
	tr, err := Translate(physMem{t}, PagingOf(ctx.CR(4), t.width), ctx.CR(3), ctx.CR(4), key.page)
	if err != nil {
		return Translation{}, err
	}
	t.tlb[key] = tr
	return tr, nil
}

// physMem reads machine memory of the domain through mapped frames.
type physMem struct{ t *Target }

func (m physMem) ReadPhys(addr uint64, p []byte) error {
	for len(p) > 0 {
		f, err := m.t.frame(addr>>12, false)
		if err != nil {
			return err
		}
		n := copy(p, f[addr&0xfff:])
		p, addr = p[n:], addr+uint64(n)
	}
	return nil
}

func (t *Target) frame(fn uint64, write bool) ([]byte, error) {
	m := t.frames
	if write {
		m = t.wframes
	}
	if b, ok := m[fn]; ok {
		return b, nil
	}
	if len(m) >= 4096 {
		for f, b := range m { // drop one at random
			UnmapFrame(b)
			delete(m, f)
			break
		}
	}
	b, err := t.hv.MapFrame(t.dom, fn, write)
	if err != nil {
		return nil, err
	}
	m[fn] = b
	if write {
		t.loose[fn] = true // kept past the next Resume only if a breakpoint byte goes in
	}
	return b, nil
}

func (t *Target) access(addr uint64, p []byte, write bool) error {
	for len(p) > 0 {
		tr, err := t.translate(addr)
		if err != nil {
			return err
		}
		f, err := t.frame(tr.Phys>>12, write)
		if err != nil {
			return err
		}
		off := (tr.Phys + addr&0xfff) & 0xfff // tr is of the page
		var n int
		if write {
			n = copy(f[off:], p)
		} else {
			n = copy(p, f[off:])
		}
		p, addr = p[n:], addr+uint64(n)
	}
	return nil
}

func (t *Target) ReadMem(space int, addr uint64, p []byte) error  { return t.access(addr, p, false) }
func (t *Target) WriteMem(space int, addr uint64, p []byte) error { return t.access(addr, p, true) }
