package pad

import (
	"encoding/binary"
	"testing"
)

// produce writes one record into the ring as a pad does (pad/build.go's
// ring routine): reserve from head, a padding record when it would pass
// the ring's end, the fields, the log, then the committed header word. It
// returns false, counting the record lost, when the ring is full.
func produce(b []byte, site uint32, data []byte) bool {
	size := int(binary.LittleEndian.Uint64(b[OffRingSize:]))
	ln := (recData + len(data) + 7) &^ 7
	head := binary.LittleEndian.Uint64(b[OffHead:])
	tail := binary.LittleEndian.Uint64(b[OffTail:])
	pos := int(head % uint64(size))
	need := ln
	if pos+ln > size {
		need = size - pos + ln
	}
	if head+uint64(need)-tail > uint64(size) {
		binary.LittleEndian.PutUint64(b[OffLost:], binary.LittleEndian.Uint64(b[OffLost:])+1)
		return false
	}
	binary.LittleEndian.PutUint64(b[OffHead:], head+uint64(need))
	if need != ln {
		binary.LittleEndian.PutUint64(b[OffRing+pos:], uint64(size-pos)|committed|padding)
		pos = 0
	}
	r := b[OffRing+pos:]
	binary.LittleEndian.PutUint32(r[recSite:], site)
	binary.LittleEndian.PutUint32(r[recTid:], 77)
	binary.LittleEndian.PutUint32(r[recLogLen:], uint32(len(data)))
	copy(r[recData:], data)
	binary.LittleEndian.PutUint64(r, uint64(ln)|committed)
	return true
}

// The ring gives back every record in order across many wraps (padding
// records skipped), frees their room, and counts what did not fit.
func TestRingDrain(t *testing.T) {
	b := make([]byte, RegionSize(MinRingSize))
	InitRegion(b, MinRingSize)
	r := NewRing(b)
	next, got := uint32(0), uint32(0)
	for round := 0; round < 50; round++ {
		// fill it up, with logs of every length up to 200 bytes
		for {
			data := make([]byte, int(next%201))
			for i := range data {
				data[i] = byte(next + uint32(i))
			}
			if !produce(b, next, data) {
				break
			}
			next++
		}
		r.Drain(func(rec *Record) {
			if rec.Site != got || rec.Tid != 77 || len(rec.Data) != int(got%201) {
				t.Fatalf("record %d: site %d tid %d, %d bytes", got, rec.Site, rec.Tid, len(rec.Data))
			}
			for i, c := range rec.Data {
				if c != byte(got+uint32(i)) {
					t.Fatalf("record %d byte %d: %d", got, i, c)
				}
			}
			got++
		}, 0)
		if got != next {
			t.Fatalf("round %d: %d records drained of %d", round, got, next)
		}
	}
	if r.Lost() != 50 {
		t.Errorf("lost %d, want one a round", r.Lost())
	}
	// the room is free and zero: a header word is 0 until committed
	for i := OffRing; i < len(b); i += 8 {
		if w := binary.LittleEndian.Uint64(b[i:]); w != 0 {
			t.Fatalf("ring word at %#x is %#x after the drain", i-OffRing, w)
		}
	}
}
