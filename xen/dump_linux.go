package xen

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/guestcore"
)

// Dump (exit 3) writes an ELF core of the guest kernel's memory from its
// mapped frames while the domain is paused at the hit (guestcore): the
// kernel image (_text to _end) and the direct map of the guest's RAM
// (page_offset_base up to max_pfn pages), at their virtual addresses
// as the guest's page tables map them, which gdb opens with the vmlinux;
// an NT_PRSTATUS per vCPU, the one that hit first; the guest's own
// vmcoreinfo text as a VMCOREINFO note. A frame mapped twice (the kernel
// image is in the direct map too) is written once; frames of zeros are
// holes of a sparse file. vmalloc and module space are not in it.
func (t *Target) Dump(space, tid int, dir string) (string, error) {
	if t.kern == nil || t.kern.Symbols() == nil {
		return "", errors.New("no symbols for the guest kernel: give System.map with --symbols to dump it")
	}
	slide, _ := t.kern.Slide()
	sym := func(name string) (uint64, error) {
		s, err := t.kern.Symbols().Lookup(name)
		if err != nil {
			return 0, err
		}
		return s.Addr + slide, nil
	}
	word := func(name string) (uint64, error) {
		a, err := sym(name)
		if err != nil {
			return 0, err
		}
		var b [8]byte
		if err := t.ReadMem(0, a, b[:]); err != nil {
			return 0, fmt.Errorf("read %s: %w", name, err)
		}
		return binary.LittleEndian.Uint64(b[:]), nil
	}
	text, err := sym("_text")
	if err != nil {
		return "", fmt.Errorf("dump: %w", err)
	}
	end, err := sym("_end")
	if err != nil {
		return "", fmt.Errorf("dump: %w", err)
	}
	maxPFN, err := word("max_pfn")
	if err != nil {
		return "", fmt.Errorf("dump: the guest's RAM size: %w", err)
	}
	pob, err := word("page_offset_base")
	if err != nil {
		pob = 0xffff888000000000 // 4-level paging without KASLR
	}
	const startKernelMap = 0xffffffff80000000
	image := guestcore.Range{Name: "kernel image", Start: text &^ 0xfff, End: (end + 0xfff) &^ 0xfff}
	if pb, err := word("phys_base"); err == nil {
		image.Phys, image.HasPhys = image.Start-startKernelMap+pb, true
	}
	opts := guestcore.Options{Ranges: []guestcore.Range{
		image,
		{Name: "direct map", Start: pob, End: pob + maxPFN*guestcore.PageSize, HasPhys: true},
	}}
	first := tid - 1
	for _, v := range append([]int{first}, t.others(first)...) {
		ctx, err := t.context(v)
		if err != nil {
			return "", err
		}
		c := guestcore.VCPU{ID: v}
		ctx.Regs(&c.Regs)
		opts.VCPUs = append(opts.VCPUs, c)
	}
	if info, err := word("vmcoreinfo_data"); err == nil && info != 0 {
		if n, err := word("vmcoreinfo_size"); err == nil && n > 0 && n <= 4096 {
			b := make([]byte, n)
			if t.ReadMem(0, info, b) == nil {
				opts.VMCoreInfo = b
			}
		}
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return "", err
	}
	path := filepath.Join(abs, fmt.Sprintf("xen%d-%s.core", t.dom, time.Now().UTC().Format("20060102T150405.000000000")))
	t0 := time.Now()
	st, err := guestcore.WriteFile(path, dumpMem{t}, opts)
	if err != nil {
		return "", err
	}
	trace("dump %s: %d pages, %d frames (%d zero), %d unmapped, %d PT_LOADs, %d MiB in %v",
		path, st.Pages, st.Frames, st.Zero, st.Unmapped, st.Loads, st.Size>>20, time.Since(t0))
	return path, nil
}

// others are the vCPUs other than v.
func (t *Target) others(v int) []int {
	var out []int
	for i := 0; i < t.vcpus; i++ {
		if i != v {
			out = append(out, i)
		}
	}
	return out
}

// dumpMem gives guestcore the domain's frames: machine frames, found by
// walking the guest's page tables, mapped 256 at a time outside the
// target's frame cache (a dump would flush it).
type dumpMem struct{ t *Target }

func (m dumpMem) Frame(va uint64) (uint64, bool, error) {
	ctx, err := m.t.context(0)
	if err != nil {
		return 0, false, err
	}
	tr, err := Translate(physMem{m.t}, PagingOf(ctx.CR(4), m.t.width), ctx.CR(3), ctx.CR(4), va)
	var nm *NotMappedError
	if errors.As(err, &nm) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return tr.Phys >> 12, true, nil
}

// ReadFrames maps a batch of frames at once (one mmap and one ioctl).
func (m dumpMem) ReadFrames(frames []uint64, p []byte) error {
	b, errs, err := m.t.hv.MapFrames(m.t.dom, frames)
	if err != nil {
		return err
	}
	defer UnmapFrame(b)
	for i, e := range errs {
		if e != 0 {
			return fmt.Errorf("xen: map frame %#x of domain %d: errno %d", frames[i], m.t.dom, -e)
		}
	}
	copy(p, b)
	return nil
}

func (m dumpMem) ReadFrame(frame uint64, p []byte) error {
	if b, ok := m.t.frames[frame]; ok {
		copy(p, b)
		return nil
	}
	b, err := m.t.hv.MapFrame(m.t.dom, frame, false)
	if err != nil {
		return err
	}
	copy(p, b)
	UnmapFrame(b)
	return nil
}

// DebuggerCommand (exit 4): the domain stays paused, out of gprobes'
// hands; gdbsx attaches to it and serves gdb on a free local port, and
// `xl unpause` takes back the pause gprobes left once gdb is done (gdbsx
// takes back only its own).
func (t *Target) DebuggerCommand(space, tid int) string {
	port := 9999
	if l, err := net.Listen("tcp", "127.0.0.1:0"); err == nil {
		port = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	return fmt.Sprintf("gdbsx -a %d 64 %d & %s; xl unpause %d", t.dom, port, t.kern.GDBCommand(fmt.Sprintf("127.0.0.1:%d", port)), t.dom)
}

var _ engine.Handover = (*Target)(nil)
