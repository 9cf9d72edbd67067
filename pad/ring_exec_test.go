//go:build linux && amd64

package pad

import (
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gprobes/gprobes/internal/jitexec"
	"github.com/gprobes/gprobes/jit"
)

// committer is the pads' commit routine (ring in build.go, the machine
// code every pad carries) run in this process on a region of its own:
// each call commits the record its scratch area describes, as a pad's
// commit does for a probe that logged.
type committer struct {
	region []byte
	code   *jitexec.Code
}

// newCommitter builds the routine for a region with a ring of size bytes:
// a stub that loads the site from the frame's first word into r12d and
// calls the routine, as a pad's commit does.
func newCommitter(t *testing.T, size int) *committer {
	t.Helper()
	region, err := unix.Mmap(-1, 0, RegionSize(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(region) })
	InitRegion(region, size)
	e := &emitter{labels: map[string]int{}}
	e.emit(0x44, 0x8b, 0x65, 0x00) // mov 0(%rbp),%r12d
	e.rel([]byte{0xe8}, "ring")    // call ring
	e.emit(0x31, 0xc0)             // xor %eax,%eax
	e.emit(0xc3)                   // ret
	e.label("ring")
	ring(e, uint64(uintptr(unsafe.Pointer(&region[0]))), size)
	if err := e.resolve(); err != nil {
		t.Fatal(err)
	}
	code, err := jitexec.Load(e.b, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { code.Close() })
	return &committer{region: region, code: code}
}

// want is a record as the test makes it and expects it back.
type want struct {
	site, tid       uint32
	tsc, addr       uint64
	exit, exception uint8
	truncated       bool
	major, minor    uint16
	pc              uint32
	data            []byte
}

func (w want) String() string {
	return fmt.Sprintf("site %d tid %d tsc %#x exit %d exception %d truncated %v major %d minor %d pc %d addr %#x, %d bytes",
		w.site, w.tid, w.tsc, w.exit, w.exception, w.truncated, w.major, w.minor, w.pc, w.addr, len(w.data))
}

// record is the record number n of producer p (0 to 4): every field
// different, the site one of the region's MaxProbes (the routine counts
// a lost record in its site's counters).
func record(p, n int) want {
	data := make([]byte, (n*7+p)%201)
	for i := range data {
		data[i] = byte(n + i + p)
	}
	return want{site: uint32(p*200 + n%200), tid: uint32(100 + p), tsc: uint64(n)<<20 | uint64(p), addr: 0xdead0000 + uint64(n),
		exit: uint8(1 + n%2), exception: uint8(n % 5), truncated: n%3 == 0, major: uint16(n), minor: uint16(n ^ 0x5555),
		pc: uint32(n * 3), data: data}
}

// scratch is a scratch area (jit's layout) and a frame for one producer.
type scratch struct {
	b     []byte
	frame []uint64
}

func newScratch() *scratch {
	return &scratch{b: make([]byte, jit.OffLog+MaxLog+64), frame: make([]uint64, 4)}
}

// commit has the machine code commit w; false: the ring was full.
func (c *committer) commit(s *scratch, st *jitexec.Stack, w want) bool {
	b := s.b
	b[jit.OffExit], b[jit.OffException] = w.exit, w.exception
	b[jit.OffTruncated] = 0
	if w.truncated {
		b[jit.OffTruncated] = 1
	}
	binary.LittleEndian.PutUint16(b[jit.OffMajor:], w.major)
	binary.LittleEndian.PutUint16(b[jit.OffMinor:], w.minor)
	binary.LittleEndian.PutUint32(b[jit.OffPC:], w.pc)
	binary.LittleEndian.PutUint32(b[jit.OffLogLen:], uint32(len(w.data)))
	binary.LittleEndian.PutUint64(b[jit.OffAddr:], w.addr)
	binary.LittleEndian.PutUint64(b[jit.OffTSC:], w.tsc)
	binary.LittleEndian.PutUint64(b[jit.OffTid:], uint64(w.tid))
	copy(b[jit.OffLog:], w.data)
	s.frame[0] = uint64(w.site)
	lost := c.lost()
	frame, scr := uintptr(unsafe.Pointer(&s.frame[0])), uintptr(unsafe.Pointer(&s.b[0]))
	if st != nil {
		c.code.CallOn(st, frame, scr)
	} else {
		c.code.Call(frame, scr)
	}
	return c.lost() == lost
}

func (c *committer) lost() uint64 { return NewRing(c.region).Lost() }

func same(g *Record, w want) bool {
	return g.Site == w.site && g.Tid == w.tid && g.TSC == w.tsc && g.Addr == w.addr && g.Exit == w.exit && g.Exception == w.exception &&
		g.Truncated == w.truncated && g.Major == w.major && g.Minor == w.minor && g.PC == w.pc && string(g.Data) == string(w.data)
}

// The ring drained is what the pads' own commit routine wrote (not a Go
// model of it): every
// field of every record, in order, across 50 fillings of the smallest
// ring (logs of 0 to 200 bytes, so padding records at its end), each
// filling ended by the first record refused and counted lost, in the
// region and in the site's counters; the drain leaves the ring zeroed.
func TestRingDrainCommitRoutine(t *testing.T) {
	c := newCommitter(t, MinRingSize)
	r := NewRing(c.region)
	s := newScratch()
	next, got := 0, 0
	var lostSites []uint32
	for round := 0; round < 50; round++ {
		for {
			w := record(0, next)
			if !c.commit(s, nil, w) {
				lostSites = append(lostSites, w.site)
				break
			}
			next++
		}
		r.Drain(func(g *Record) {
			if w := record(0, got); !same(g, w) {
				t.Fatalf("round %d, record %d:\n got %+v\nwant %v", round, got, *g, w)
			}
			got++
		}, 0)
		if got != next {
			t.Fatalf("round %d: %d records drained of %d committed", round, got, next)
		}
	}
	if r.Lost() != 50 {
		t.Errorf("lost %d, want one a round", r.Lost())
	}
	// the site's own count of lost records, where the routine counts them
	perSite := map[uint32]uint64{}
	for _, site := range lostSites {
		perSite[site]++
	}
	for site, n := range perSite {
		if c := LoadCounters(CountersAt(c.region, int(site))); c.Lost != n {
			t.Errorf("site %d: counters say %d lost, want %d", site, c.Lost, n)
		}
	}
	for i := OffRing; i < len(c.region); i += 8 {
		if w := binary.LittleEndian.Uint64(c.region[i:]); w != 0 {
			t.Fatalf("ring word at %#x is %#x after the drain", i-OffRing, w)
		}
	}
	t.Logf("%d records in 50 fillings", next)
}

// Four threads commit at once through the machine code (lock cmpxchg on
// the head) while the drain runs: each thread's records come out whole
// and in its order, and records drained + lost = records committed,
// exactly.
func TestRingConcurrentCommits(t *testing.T) {
	c := newCommitter(t, MinRingSize)
	r := NewRing(c.region)
	const producers, per = 4, 20000
	var wg sync.WaitGroup
	accepted := make([][]bool, producers)
	for p := 0; p < producers; p++ {
		st, err := jitexec.NewStack()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		accepted[p] = make([]bool, per)
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			s := newScratch()
			for n := 0; n < per; n++ {
				// whether it came: the drain tells (another thread's
				// refusal may count meanwhile)
				c.commit(s, st, record(p+1, n))
			}
		}(p)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	nextOf := make([]int, producers)
	drained := 0
	var bad []string // reported once the producers are done (their stacks are the test's)
	check := func(g *Record) {
		if len(bad) > 0 {
			return
		}
		p := int(g.Tid) - 101
		if p < 0 || p >= producers {
			bad = append(bad, fmt.Sprintf("a record of tid %d: %+v", g.Tid, *g))
			return
		}
		// the next accepted record of p: skip the lost ones, whose
		// place in p's sequence the drain cannot see, by matching
		for n := nextOf[p]; n < per; n++ {
			if same(g, record(p+1, n)) {
				accepted[p][n] = true
				nextOf[p] = n + 1
				drained++
				return
			}
		}
		bad = append(bad, fmt.Sprintf("producer %d, after its record %d: a record that is none of its later ones: %+v", p+1, nextOf[p]-1, *g))
	}
	for {
		select {
		case <-done:
			r.Drain(check, 0)
			if len(bad) > 0 {
				t.Fatal(bad[0])
			}
			if total := uint64(drained) + r.Lost(); total != producers*per {
				t.Fatalf("%d drained + %d lost = %d, want %d", drained, r.Lost(), total, producers*per)
			}
			t.Logf("%d drained, %d lost", drained, r.Lost())
			return
		default:
			r.Drain(check, 0)
		}
	}
}
