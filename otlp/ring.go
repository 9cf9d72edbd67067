package otlp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The ring: records on their way from the daemon to its forwarder, in
// shared memory (a memfd the daemon creates and the forwarder maps through
// its descriptor 3).
//
//	offset 0    head     bytes ever put (the daemon writes it)
//	offset 8    tail     bytes ever taken (the forwarder writes it)
//	offset 16   put      records ever put (daemon)
//	offset 24   taken    records ever taken (forwarder)
//	offset 32   sent     records the receiver accepted (forwarder)
//	offset 40   size     bytes of the data area, a power of two
//	offset 48   magic    ringMagic
//	offset 4096 data     records: a 4-byte little-endian length, then the
//	                     record as the log stream has it (daemon.LogLine's
//	                     JSON); a record may wrap around the end
//
// One writer (the daemon, under its lock) and one reader (the forwarder).
// The writer copies a record in, then publishes head; the reader reads
// head, copies the records out, then publishes tail: neither ever reads
// what the other may be writing. A record that does not fit in the free
// space is not put (the daemon counts it dropped).
const (
	offHead, offTail, offPut, offTaken, offSent, offSize, offMagic = 0, 8, 16, 24, 32, 40, 48
	dataOff                                                        = 4096
	ringMagic                                                      = 0x676f746c70726e67 // "gotlprng"
	// MaxRecord is the largest record the ring takes, in bytes of JSON.
	maxRecord = 1 << 20
)

// ring is a mapping of the ring.
type ring struct {
	mem  []byte
	data []byte
	mask uint64
}

// newRing lays a ring out in mem (a mapping of dataOff + size bytes, size
// a power of two).
func newRing(mem []byte, size int) (*ring, error) {
	if size < 4096 || size&(size-1) != 0 || len(mem) < dataOff+size {
		return nil, fmt.Errorf("otlp ring: %d bytes: a power of two, at least 4096", size)
	}
	r := &ring{mem: mem, data: mem[dataOff : dataOff+size], mask: uint64(size - 1)}
	binary.LittleEndian.PutUint64(mem[offSize:], uint64(size))
	atomic.StoreUint64(r.word(offMagic), ringMagic)
	return r, nil
}

// mapRing maps the ring of fd (the forwarder's side).
func mapRing(fd int) (*ring, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("otlp ring: %w", err)
	}
	if st.Size < dataOff+4096 {
		return nil, errors.New("otlp ring: too small")
	}
	mem, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("otlp ring: map: %w", err)
	}
	r := &ring{mem: mem}
	size := binary.LittleEndian.Uint64(mem[offSize:])
	if atomic.LoadUint64(r.word(offMagic)) != ringMagic || size == 0 || size&(size-1) != 0 || int64(dataOff+size) > st.Size {
		unix.Munmap(mem)
		return nil, errors.New("otlp ring: not a ring (magic, size)")
	}
	r.data, r.mask = mem[dataOff:dataOff+size], size-1
	return r, nil
}

func (r *ring) word(off int) *uint64 { return (*uint64)(unsafe.Pointer(&r.mem[off])) }

func (r *ring) load(off int) uint64     { return atomic.LoadUint64(r.word(off)) }
func (r *ring) add(off int, n uint64)   { atomic.AddUint64(r.word(off), n) }
func (r *ring) store(off int, v uint64) { atomic.StoreUint64(r.word(off), v) }

// put copies b in as one record and says whether it fit. One writer at a
// time.
func (r *ring) put(b []byte) bool {
	need := uint64(4 + len(b))
	head := r.load(offHead)
	if len(b) > maxRecord || need > uint64(len(r.data))-(head-r.load(offTail)) {
		return false
	}
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], uint32(len(b)))
	r.copyIn(head, n[:])
	r.copyIn(head+4, b)
	r.store(offHead, head+need)
	r.add(offPut, 1)
	return true
}

func (r *ring) copyIn(at uint64, b []byte) {
	i := at & r.mask
	k := copy(r.data[i:], b)
	copy(r.data, b[k:])
}

func (r *ring) copyOut(at uint64, b []byte) {
	i := at & r.mask
	k := copy(b, r.data[i:])
	copy(b[k:], r.data)
}

// next returns the record at tail (copied into buf) and where the one
// after it starts, or ok false when there is none (or the ring is
// corrupt). The reader publishes its tail with done.
func (r *ring) next(tail uint64, buf []byte) (rec []byte, after uint64, ok bool) {
	head := r.load(offHead)
	if head-tail < 4 {
		return nil, tail, false
	}
	var n [4]byte
	r.copyOut(tail, n[:])
	size := uint64(binary.LittleEndian.Uint32(n[:]))
	if size > maxRecord || head-tail < 4+size {
		return nil, tail, false
	}
	if uint64(cap(buf)) < size {
		buf = make([]byte, size)
	}
	buf = buf[:size]
	r.copyOut(tail+4, buf)
	return buf, tail + 4 + size, true
}

// done publishes the reader's position: n more records taken.
func (r *ring) done(tail uint64, n uint64) {
	r.store(offTail, tail)
	r.add(offTaken, n)
}
