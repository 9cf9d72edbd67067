package x86

import (
	"slices"
	"testing"
)

// ScanCode starts again at each sync point: a byte of data before a
// function (here 0xe8, read as the first byte of a call) would otherwise
// swallow its first instruction, a jump whose target is then missed. A
// byte that does not decode is stepped over.
func TestScanCodeSync(t *testing.T) {
	const at = 0x1000
	code := []byte{
		0xe8,       // data (reads as a call that swallows the next 4 bytes)
		0xeb, 0x02, // 0x1001: jmp 0x1005
		0x90, 0x90, // 0x1003
		0xc3,       // 0x1005: ret
		0x06,       // 0x1006: push es, invalid in 64-bit mode
		0x74, 0xf8, // 0x1007: je 0x1001
	}
	without := ScanCode(code, at, 64, nil)
	with := ScanCode(code, at, 64, []uint64{at + 1})
	targets := func(cs CodeScan) []uint64 {
		var out []uint64
		for _, b := range cs.Branches {
			out = append(out, b.To)
		}
		return out
	}
	if slices.Contains(targets(without), at+5) {
		t.Fatalf("without the sync point the jmp was found: %+v (the test shows nothing)", without)
	}
	got := targets(with)
	if !slices.Contains(got, at+5) || !slices.Contains(got, at+1) {
		t.Errorf("with the sync point: %#x, want 0x1005 (the jmp) and 0x1001 (the je)", got)
	}
	if with.Skipped != 2 { // the data byte and the invalid one
		t.Errorf("skipped %d bytes, want 2: %+v", with.Skipped, with)
	}
}

// Any bytes and sync points: no panic, every branch from inside the code.
func FuzzScanCode(f *testing.F) {
	f.Add([]byte{0xe8, 0xeb, 0x02, 0x90, 0x90, 0xc3}, uint16(1))
	f.Add([]byte{0xff, 0xe0, 0x48, 0x8d, 0x05, 0, 0, 0, 0}, uint16(0))
	f.Fuzz(func(t *testing.T, code []byte, sync uint16) {
		const at = 0x400000
		cs := ScanCode(code, at, 64, []uint64{at + uint64(sync)})
		for _, b := range cs.Branches {
			if b.From < at || b.From >= at+uint64(len(code)) {
				t.Fatalf("branch from %#x outside the code", b.From)
			}
		}
		if cs.Decoded+cs.Skipped > len(code) {
			t.Fatalf("decoded %d + skipped %d > %d bytes", cs.Decoded, cs.Skipped, len(code))
		}
	})
}
