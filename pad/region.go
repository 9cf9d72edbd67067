// Package pad builds jump pads: the code gprobes writes into a process
// so that a probe runs in the thread that hits it, with no trap
// (docs/engine.md, "Jump pads: probes that run inside the process"), and the data region the pads share with
// gprobes: counters, local variables, the clock, the thread table and the
// ring of committed records.
package pad

import (
	"encoding/binary"
	"sync/atomic"
	"unsafe"

	"github.com/gprobes/gprobes/jit"
)

// The data region, one per process (a fork child shares its parent's: the
// mapping is MAP_SHARED), at offsets from its start. Records carry the
// thread id, so whose they are is known.
const (
	OffMagic    = 0
	OffRingSize = 8   // u64 bytes of ring
	OffHead     = 64  // u64 bytes ever reserved by the pads (producers, lock cmpxchg)
	OffTail     = 128 // u64 bytes ever consumed by gprobes
	OffLost     = 192 // u64 records dropped: the ring was full
	OffClock    = 256 // jit.Clock
	// OffTCBTid: where in its thread control block (from fs_base) a
	// thread finds its own id, 0 when the pads must ask the kernel
	// (gettid, 160 ns a record on the reference machine). gprobes sets it
	// where every thread it checked holds its id there (glibc's struct
	// pthread: 0x2d0) and rdfsbase is allowed; it clears it when a
	// thread does not.
	OffTCBTid = 320
	// OffMissed: u64 hits that ran no probe because every pad stack was
	// in use (pad.PoolSlots threads inside pads at once)
	OffMissed = 384
	// OffNoTSC: a byte, non-zero once a pad's rdtsc faulted (the process
	// traps it: PR_SET_TSC, PR_TSC_SIGSEGV): the pads read the time with
	// clock_gettime instead (jit.Layout.NoTSC)
	OffNoTSC    = 448
	OffCounters = 4096
	MaxProbes   = 1024 // probes (sites × probes there) one region serves
	OffLV       = OffCounters + MaxProbes*64
	LVWords     = 8192
	OffThreads  = OffLV + LVWords*8
	OffRing     = OffThreads + jit.ThreadSlots*jit.ThreadEntry

	Magic = 0x3244415042505247 // "GPRBPAD2"

	// DefaultRingSize is the ring's bytes unless gprobes is told
	// otherwise (--ring): a record takes its header and its log rounded to
	// 8, 64 bytes for two logged words (1,048,576 of them in 64 MiB: a
	// burst of a million records fits even while the drain does not run;
	// docs/records.md, "Rings and the drain"). A ring's size is a power
	// of two from MinRingSize to MaxRingSize; its pages are the system's
	// only once records are written to them.
	DefaultRingSize = 64 << 20
	MinRingSize     = 64 << 10
	MaxRingSize     = 1 << 30

	// A record: a header word (its length in bytes, committed and
	// padding flags), then the fields, then the log.
	recSite   = 8
	recTid    = 12
	recTSC    = 16
	recHdr    = 24 // exit, exception, truncated, -, major u16, minor u16
	recPC     = 32
	recLogLen = 36
	recAddr   = 40
	recData   = 48

	committed = 1 << 63
	padding   = 1 << 62

	// MaxLog is the largest logmax a probe on the jump route may have.
	MaxLog = 4096
)

// RegionSize is the size of a region whose ring has ring bytes.
func RegionSize(ring int) int { return OffRing + ring }

// InitRegion prepares a new region's bytes (RegionSize(ring) of them).
func InitRegion(b []byte, ring int) {
	binary.LittleEndian.PutUint64(b[OffMagic:], Magic)
	binary.LittleEndian.PutUint64(b[OffRingSize:], uint64(ring))
}

// Record is one record a pad committed, as the ring holds it.
type Record struct {
	Site      uint32
	Tid       uint32
	TSC       uint64
	Exit      uint8
	Exception uint8
	Truncated bool
	Major     uint16
	Minor     uint16
	PC        uint32
	Addr      uint64
	Data      []byte // valid until the next Drain
}

// Ring is gprobes' end of a region's ring: the only consumer. The pads
// reserve space with a lock cmpxchg on the head (refusing, and counting
// the record lost, when head - tail would pass RingSize), write the
// record, then its header word with the committed flag. A record never
// wraps: one that would is preceded by a padding record to the end.
type Ring struct {
	b    []byte
	size int
	rec  Record
}

// NewRing reads the ring of the region b (gprobes' mapping, made by
// InitRegion).
func NewRing(b []byte) *Ring {
	return &Ring{b: b, size: int(binary.LittleEndian.Uint64(b[OffRingSize:]))}
}

func word(b []byte, off int) *uint64 { return (*uint64)(unsafe.Pointer(&b[off])) }

// Lost is the number of records the pads dropped because the ring was full.
func (r *Ring) Lost() uint64 { return atomic.LoadUint64(word(r.b, OffLost)) }

// Drain hands committed records to f, oldest first, and frees their
// space (zeroed: a header word is 0 until its record is committed); it
// stops at the first record not committed yet, or after most records (0:
// no limit). It returns how many.
func (r *Ring) Drain(f func(*Record), most int) int {
	n := 0
	var buf []byte
	for most == 0 || n < most {
		var k int
		buf, k = r.Take(buf[:0], 64<<10, most-n)
		if k == 0 {
			break
		}
		n += Decode(buf, &r.rec, f)
	}
	return n
}

// Take moves committed records out of the ring, whole and as the ring
// holds them, appending them to dst: the oldest first, up to the first
// record not committed yet, at most max bytes (at least one record when
// one is committed) and at most most records (0: no limit). Their space
// is zeroed (a header word is 0 until its record is committed) and given
// back to the pads with one store of the tail. Padding records are left
// out. It returns dst and the number of records appended. This is the
// drain's bulk path: a memory copy, no record is looked into.
func (r *Ring) Take(dst []byte, max, most int) ([]byte, int) {
	tail := atomic.LoadUint64(word(r.b, OffTail))
	n, moved := 0, 0
	for most <= 0 || n < most {
		pos := int(tail % uint64(r.size))
		// a run of committed records from pos, up to the ring's end
		end, k := pos, 0
		pad := false
		for end < r.size && (most <= 0 || n+k < most) {
			h := atomic.LoadUint64(word(r.b, OffRing+end))
			if h&committed == 0 {
				break
			}
			ln := int(h & 0xffffffff)
			if ln < 8 || ln%8 != 0 || end+ln > r.size || h&padding != 0 {
				// padding to the ring's end (or a header our pads never
				// write: never read past the ring)
				if end == pos {
					pad = true
					end = r.size
				}
				break
			}
			if end > pos && moved+end-pos+ln > max {
				break
			}
			end += ln
			k++
		}
		if end == pos {
			break
		}
		span := r.b[OffRing+pos : OffRing+end]
		if !pad {
			dst = append(dst, span...)
			moved += len(span)
			n += k
		}
		clear(span)
		tail += uint64(end - pos)
		atomic.StoreUint64(word(r.b, OffTail), tail)
		if !pad && end < r.size {
			break // the next record is not committed yet, or max
		}
		if moved >= max {
			break
		}
	}
	return dst, n
}

// Decode hands each record of b, records as Take moved them, to f in
// rec (its Data valid until f returns). It returns how many.
func Decode(b []byte, rec *Record, f func(*Record)) int {
	n := 0
	for len(b) >= recData {
		ln := int(binary.LittleEndian.Uint64(b) & 0xffffffff)
		if ln < recData || ln > len(b) {
			break // Take never moves such a record
		}
		s := b[:ln]
		b = b[ln:]
		rec.Site = binary.LittleEndian.Uint32(s[recSite:])
		rec.Tid = binary.LittleEndian.Uint32(s[recTid:])
		rec.TSC = binary.LittleEndian.Uint64(s[recTSC:])
		rec.Exit = s[recHdr]
		rec.Exception = s[recHdr+1]
		rec.Truncated = s[recHdr+2] != 0
		rec.Major = binary.LittleEndian.Uint16(s[recHdr+4:])
		rec.Minor = binary.LittleEndian.Uint16(s[recHdr+6:])
		rec.PC = binary.LittleEndian.Uint32(s[recPC:])
		dl := int(binary.LittleEndian.Uint32(s[recLogLen:]))
		if dl > ln-recData {
			dl = ln - recData
		}
		rec.Addr = binary.LittleEndian.Uint64(s[recAddr:])
		rec.Data = s[recData : recData+dl]
		f(rec)
		n++
	}
	return n
}

// RecordLen is the length of the record at the start of b (records as
// Take moved them), at most len(b).
func RecordLen(b []byte) int {
	ln := len(b)
	if ln >= 8 {
		ln = min(int(binary.LittleEndian.Uint64(b)&0xffffffff), ln)
	}
	return max(ln, min(8, len(b)))
}

// CountersAt returns the counters of probe slot i of the region.
func CountersAt(b []byte, i int) *jit.Counters {
	return (*jit.Counters)(unsafe.Pointer(&b[OffCounters+i*64]))
}

// LoadCounters reads counters atomically, field by field.
func LoadCounters(c *jit.Counters) jit.Counters {
	return jit.Counters{
		Hits:     atomic.LoadUint64(&c.Hits),
		Skipped:  atomic.LoadUint64(&c.Skipped),
		Runs:     atomic.LoadUint64(&c.Runs),
		Faults:   atomic.LoadUint64(&c.Faults),
		Disabled: atomic.LoadUint64(&c.Disabled),
		Lost:     atomic.LoadUint64(&c.Lost),
		Missed:   atomic.LoadUint64(&c.Missed),
	}
}

// SetThread enters thread tid (the id it sees itself, gettid) with its
// index in the region's thread table (push procid) and its ids in
// gprobes' pid namespace (push pid, push tid, records: the same as tid
// and its process's id unless the process runs in a namespace of its
// own); index < 0 takes it out. The root ids go in first, then tid and
// index with one store (jit.Layout.Threads).
func SetThread(b []byte, tid, index, rootTid, rootPid int) {
	h := uint64(uint32(tid)*0x9e3779b1) >> (32 - jit.ThreadBits)
	for i := 0; i < jit.ThreadSlots; i++ {
		off := OffThreads + int((h+uint64(i))&(jit.ThreadSlots-1))*jit.ThreadEntry
		w := word(b, off)
		v := atomic.LoadUint64(w)
		t := uint32(v)
		if t == uint32(tid) || t == 0 {
			if index < 0 {
				if t == uint32(tid) {
					// keep the chain: a tombstone no tid matches
					atomic.StoreUint64(w, 0xffffffff)
				}
				return
			}
			atomic.StoreUint64(word(b, off+8), uint64(uint32(rootTid))|uint64(uint32(rootPid))<<32)
			atomic.StoreUint64(w, uint64(uint32(tid))|uint64(uint32(index))<<32)
			return
		}
	}
}
