package kernel

import (
	"encoding/binary"
	"strings"
	"sync"

	"github.com/gprobes/gprobes/internal/procmaps"
	"github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/symbols"
	"github.com/gprobes/gprobes/unwind"
)

// Names of the stacks a record's program logged (log kstack, log
// ustack; bpf/stack.go takes them): the record's layout (from the
// probe's code) finds them in the data; kernel frames are named from
// /proc/kallsyms (read at the first stack, and again when a frame is in
// no symbol: a module loaded since), user frames from the process's
// /proc/PID/maps as the record is read (a process gone by then leaves
// them unnamed) and the mapped files' symbols. The reader goroutines
// call it: it keeps its own state under its own lock.
type stackNamer struct {
	mu      sync.Mutex
	kall    *symbols.Set
	reread  bool // kallsyms was read again since a frame was last named
	unw     *unwind.Unwinder
	layouts map[*rpn.Module]map[int][]rpn.Layout
}

// stacks names the stacks in the data of probe pi of m, or nil.
func (n *stackNamer) stacks(m *rpn.Module, pi int, pid int, data []byte) []probe.Stack {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.layouts == nil {
		n.layouts = map[*rpn.Module]map[int][]rpn.Layout{}
	}
	byProbe := n.layouts[m]
	if byProbe == nil {
		byProbe = map[int][]rpn.Layout{}
		n.layouts[m] = byProbe
	}
	ls, ok := byProbe[pi]
	if !ok {
		ls = rpn.LogLayouts(m, pi)
		has := false
		for _, l := range ls {
			for _, it := range l {
				has = has || it.Stack()
			}
		}
		if !has {
			ls = nil
		}
		byProbe[pi] = ls
	}
	if ls == nil {
		return nil
	}
	vals, ok := rpn.Split(ls, data)
	if !ok {
		return nil
	}
	var out []probe.Stack
	for _, v := range vals {
		if !v.Item.Stack() {
			continue
		}
		pcs := v.Frames()
		if v.Item.Kind == 'k' {
			out = append(out, probe.Stack{Kind: "kernel", Frames: n.kernelFrames(pcs)})
		} else {
			out = append(out, probe.Stack{Kind: "user", Frames: n.userFrames(pid, pcs)})
		}
	}
	return out
}

// kernelStack names the kernel stack of an exception record of a probe
// with autostacktrace = yes: data is its frames' addresses, 8 bytes
// each, zeros after the last.
func (n *stackNamer) kernelStack(data []byte) []probe.Frame {
	var pcs []uint64
	for i := 0; i+8 <= len(data); i += 8 {
		pc := binary.LittleEndian.Uint64(data[i:])
		if pc == 0 {
			break
		}
		pcs = append(pcs, pc)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.kernelFrames(pcs)
}

func (n *stackNamer) kernelFrames(pcs []uint64) []probe.Frame {
	out := make([]probe.Frame, len(pcs))
	for pass := 0; pass < 2; pass++ {
		if n.kall == nil || pass == 1 {
			if t, err := symbols.Open("/proc/kallsyms"); err == nil {
				n.kall = symbols.NewSet(t)
			}
		}
		missing := false
		for i, pc := range pcs {
			out[i] = probe.Frame{Address: probe.Hex(pc)}
			look := pc
			if i > 0 {
				look-- // a return address: the call is before it
			}
			if n.kall == nil {
				continue
			}
			s, ok := n.kall.SymbolAt(look)
			if !ok {
				missing = true
				continue
			}
			out[i].Function, out[i].Offset, out[i].Module = s.Name, pc-s.Addr, "vmlinux"
			if s.Module != "" {
				out[i].Module = s.Module
			}
		}
		if !missing || n.reread {
			break
		}
		n.reread = true // once: an address kallsyms never names would read it at every record
	}
	return out
}

func (n *stackNamer) userFrames(pid int, pcs []uint64) []probe.Frame {
	if n.unw == nil {
		n.unw = unwind.New()
	}
	var mods unwind.Modules
	if maps, err := procmaps.Read(pid); err == nil {
		for _, m := range maps {
			if m.Exec() && strings.HasPrefix(m.Path, "/") {
				mods = append(mods, unwind.Mapping{Start: m.Start, End: m.End, Offset: m.Offset, Path: m.Path, Dev: m.Dev, Inode: m.Inode})
			}
		}
	}
	mods.Sort()
	named := n.unw.Name(pcs, 1, mods) // the first is where the task entered the kernel from
	out := make([]probe.Frame, len(pcs))
	for i, f := range named {
		out[i] = probe.Frame{Address: probe.Hex(f.PC), Function: f.Function, Offset: f.Offset, Module: f.Module}
	}
	return out
}
