//go:build linux

package ptrace

import "testing"

// freeNear: the closest free gap within ±2 GiB of the code, a page from
// its neighbours, never where the heap or the main stack grow.
func TestFreeNear(t *testing.T) {
	const size = 256 << 10
	pie := []Mapping{
		{Start: 0x555555554000, End: 0x555555556000, Path: "/bin/prog"},
		{Start: 0x555555556000, End: 0x555555558000, Path: "/bin/prog"},
		{Start: 0x555555559000, End: 0x55555557a000, Path: "[heap]"},
		{Start: 0x7ffff7dd0000, End: 0x7ffff7ff0000, Path: "/lib/libc.so.6"},
		{Start: 0x7ffffffde000, End: 0x7ffffffff000, Path: "[stack]"},
	}
	reserved := []span{{0x55555557a000, 0x55555557a000 + heapRoom}, {0x7ffffffde000 - minStackRoom, 0x7ffffffde000}}
	for _, c := range []struct {
		name     string
		maps     []Mapping
		near     uint64
		reserved []span
		want     uint64
		ok       bool
	}{
		// just below the program, a page away
		{"pie", pie, 0x555555555000, reserved, 0x555555554000 - guardGap - size, true},
		// below libc (the heap's room is far)
		{"lib", pie, 0x7ffff7de0000, reserved, 0x7ffff7dd0000 - guardGap - size, true},
		// a program at 0x400000 with its heap right after: below it
		{"non-pie", []Mapping{{Start: 0x400000, End: 0x401000}, {Start: 0x401000, End: 0x500000}, {Start: 0x500000, End: 0x521000, Path: "[heap]"}},
			0x400800, []span{{0x521000, 0x521000 + heapRoom}}, 0x400000 - guardGap - size, true},
		// no room below it (1 MiB is the floor) and the heap's room
		// above: past the heap's gigabyte, still within reach
		{"non-pie low", []Mapping{{Start: 0x100000, End: 0x101000}, {Start: 0x101000, End: 0x200000}, {Start: 0x200000, End: 0x221000, Path: "[heap]"}},
			0x100800, []span{{0x221000, 0x221000 + heapRoom}}, 0x221000 + heapRoom, true},
		// everything within reach taken
		{"full", []Mapping{{Start: minAddr, End: 0x200000000}}, 0x100000000, nil, 0, false},
	} {
		got, ok := freeNear(c.maps, c.near, size, c.reserved)
		if ok != c.ok || got != c.want {
			t.Errorf("%s: %#x %v, want %#x %v", c.name, got, ok, c.want, c.ok)
			continue
		}
		if ok {
			for _, m := range c.maps {
				if got < m.End+guardGap && got+size+guardGap > m.Start {
					t.Errorf("%s: %#x overlaps or touches %#x-%#x", c.name, got, m.Start, m.End)
				}
			}
			for _, r := range c.reserved {
				if got < r.hi && got+size > r.lo {
					t.Errorf("%s: %#x is in the room kept at %#x-%#x", c.name, got, r.lo, r.hi)
				}
			}
			if d := int64(got - c.near); d < -reach || d > reach-size {
				t.Errorf("%s: %#x is out of reach of %#x", c.name, got, c.near)
			}
		}
	}
}
