package bpf

import (
	"github.com/cilium/ebpf"
)

// Maps are the eBPF maps the probes of one module use (NewMaps makes
// them):
//
//	Scratch   per-CPU array, one entry of ScratchSize(logmax) bytes per
//	          probe (an array of one entry per possible CPU and probe,
//	          keyed by CPU*probes+probe, when that is above PerCPULimit):
//	          the stack, the loop state, the header and the log of the
//	          probe's hit running on that CPU. One per probe: a tracepoint
//	          or kprobe program never runs nested in another on a CPU
//	          (bpf_prog_active), but a raw tracepoint's may be interrupted
//	          by another probe's (an interrupt's tracepoint), and each
//	          program guards only against itself.
//	Ring      ring buffer: the records
//	Counters  array, 1 entry (mmapable): GlobalsSize bytes of globals (the
//	          clock offset), then CountersSize bytes per probe
//	LV        array, 1 entry (mmapable): the module's vars, 8 bytes each
//	GV        array, 1 entry (mmapable): rpn.MaxGVars words, shared by the
//	          modules given the same map (MapOptions.GV)
//	Switch    array, 1 entry (mmapable): SwitchSize bytes, the module's
//	          switches, a byte per minor (switch.go), shared by the
//	          sources given the same map (MapOptions.Switch)
//
// One-entry arrays are addressed directly (BPF_PSEUDO_MAP_VALUE: a 64-bit
// load of the value's address, no lookup call).
type Maps struct {
	Scratch  *ebpf.Map
	Ring     *ebpf.Map
	Counters *ebpf.Map
	LV       *ebpf.Map
	GV       *ebpf.Map
	Switch   *ebpf.Map
	IV       *ebpf.Map // LRU hash: the module's calls' instance variables (iv.go), nil when no probe has a part in them
	// Procs (MapOptions.Procs) is an LRU hash of hits by probe and
	// process: key probe<<32 | pid, value the hits (procs.go); nil
	// without
	Procs *ebpf.Map

	probes, vars int
	ownGV        bool
	ownRing      bool
	ownLV        bool
	ownSwitch    bool
	ownIV        bool
	ownProcs     bool
}

// MapOptions tune NewMaps.
type MapOptions struct {
	// RingSize is the ring buffer's size in bytes: a power of two, a
	// multiple of the page size. 0 means 1 MiB.
	RingSize int
	// GV, when set, is the gv map to use (shared with other modules);
	// otherwise NewMaps makes one.
	GV *ebpf.Map
	// Ring, when set, is the ring buffer to use.
	Ring *ebpf.Map
	// LV, when set, is the lv map to use (NewLV: the sources of one
	// module inserted with --merge share it); otherwise NewMaps makes one.
	LV *ebpf.Map
	// Switch, when set, is the switch map to use (NewSwitch: the sources
	// of one module share it); otherwise NewMaps makes one.
	Switch *ebpf.Map
	// IV makes the instance map (Maps.IV, iv.go), for a module whose
	// probes share calls' instance variables.
	IV bool
	// Procs makes the map of hits by process (Maps.Procs, procs.go).
	Procs bool
}

// DefaultRingSize is the ring buffer's size when MapOptions.RingSize is 0.
const DefaultRingSize = 1 << 20
