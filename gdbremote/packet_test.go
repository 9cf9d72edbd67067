package gdbremote

import (
	"bufio"
	"bytes"
	"io"
	"reflect"
	"strings"
	"testing"
)

// One case per line: the bytes on the wire, then what readFrame returns.
var frameCases = []struct {
	wire  string
	kind  byte
	data  string
	sumOK bool
}{
	{"$OK#9a", '$', "OK", true},
	{"$#00", '$', "", true},
	{"+", '+', "", false},
	{"-", '-', "", false},
	{"garbage\r\n$OK#9a", '$', "OK", true},  // noise before a packet is skipped
	{"$OK#9A", '$', "OK", true},             // upper-case checksum digits
	{"$OK#9b", '$', "OK", false},            // bad checksum: reported, not an error
	{"$OK#zz", '$', "OK", false},            // non-hex checksum
	{"$0* #7a", '$', "0000", true},          // ' ' = 32: '0' and 3 repeats
	{"$0*\"#7c", '$', "000000", true},       // '"' = 34: 5 repeats
	{"$a*!b#0e", '$', "aaaaab", true},       // '!' = 33: 4 repeats
	{"$*!#4b", '$', "*!", false},            // a run with nothing before it
	{"$ab*#ed", '$', "ab*", false},          // a run without a count
	{"%Stop:T05#99", '%', "Stop:T05", true}, // a notification
	{"$T05thread:p01.01;#06", '$', "T05thread:p01.01;", true},
}

func TestReadFrame(t *testing.T) {
	for _, c := range frameCases {
		f, err := readFrame(bufio.NewReader(strings.NewReader(c.wire)))
		if err != nil {
			t.Errorf("%q: %v", c.wire, err)
			continue
		}
		if c.kind == '$' && c.sumOK {
			// frameOf writes the case's frame back.
			start := strings.IndexByte(c.wire, '$')
			data := c.wire[start+1 : strings.IndexByte(c.wire, '#')]
			if w := string(frameOf(nil, []byte(data))); !strings.EqualFold(w, c.wire[start:]) {
				t.Errorf("frameOf(%q) = %q, want %q", data, w, c.wire[start:])
			}
		}
		want := c.data
		if f.kind != c.kind || string(f.data) != want || f.sumOK != c.sumOK {
			t.Errorf("%q: got %c %q sum %v, want %c %q sum %v", c.wire, f.kind, f.data, f.sumOK, c.kind, want, c.sumOK)
		}
	}
}

func TestReadFrameTruncated(t *testing.T) {
	for _, w := range []string{"$OK", "$OK#", "$OK#9", ""} {
		_, err := readFrame(bufio.NewReader(strings.NewReader(w)))
		if err != io.EOF && err != io.ErrUnexpectedEOF {
			t.Errorf("%q: %v, want EOF", w, err)
		}
	}
	long := "$" + strings.Repeat("0", maxPacket+10) + "#00"
	if _, err := readFrame(bufio.NewReader(strings.NewReader(long))); err != errTooLong {
		t.Errorf("overlong packet: %v", err)
	}
	// A short run that expands past the limit.
	bomb := "$" + strings.Repeat("0*~", maxPacket/90) + "#00"
	if _, err := readFrame(bufio.NewReader(strings.NewReader(bomb))); err != nil {
		t.Errorf("run bomb: %v", err)
	}
}

func TestEscape(t *testing.T) {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	enc := appendEscaped(nil, all)
	for i := 0; i < len(enc); i++ {
		if c := enc[i]; c == '#' || c == '$' || c == '*' {
			t.Fatalf("escaped data holds %q at %d", c, i)
		}
	}
	if len(enc) != 256+4 {
		t.Errorf("escaped length %d, want 260 (4 escapes)", len(enc))
	}
	dec, err := unescape(append([]byte(nil), enc...))
	if err != nil || !bytes.Equal(dec, all) {
		t.Fatalf("round trip: %v", err)
	}
	if _, err := unescape([]byte("ab}")); err == nil {
		t.Error("a trailing escape is accepted")
	}
	// Escapes survive a frame: the frame reader leaves them for unescape.
	f, err := readFrame(bufio.NewReader(bytes.NewReader(frameOf(nil, append([]byte("b"), enc...)))))
	if err != nil || !f.sumOK {
		t.Fatalf("frame of escaped data: %v %v", err, f.sumOK)
	}
	dec, err = unescape(f.data[1:])
	if err != nil || !bytes.Equal(dec, all) {
		t.Fatalf("framed round trip: %v", err)
	}
}

func TestDecodeHex(t *testing.T) {
	var b [4]byte
	if u, err := decodeHex(b[:], []byte("0aFFxx10")); err != nil || !u || b != [4]byte{0x0a, 0xff, 0, 0x10} {
		t.Errorf("%v %v % x", u, err, b)
	}
	if _, err := decodeHex(b[:1], []byte("0g")); err == nil {
		t.Error("bad digit accepted")
	}
	if _, err := decodeHex(b[:1], []byte("0")); err == nil {
		t.Error("odd length accepted")
	}
}

func TestParseStop(t *testing.T) {
	cases := []struct {
		in   string
		want Stop
	}{
		{"S05", Stop{Signal: 5, Core: -1}},
		{"T02thread:01;", Stop{Signal: 2, Core: -1, Thread: Thread{ID: "01", Num: 1}}},
		{"T05thread:p01.02;", Stop{Signal: 5, Core: -1, Thread: Thread{ID: "p01.02", Pid: 1, Num: 2}}},
		{"T05swbreak:;06:0100000000000000;10:0611400000000000;thread:p6cd7.6cd7;core:1;",
			Stop{Signal: 5, Reason: "swbreak", Core: 1, Thread: Thread{ID: "p6cd7.6cd7", Pid: 0x6cd7, Num: 0x6cd7},
				Regs: map[int]uint64{6: 1, 16: 0x401106}}},
		{"T05watch:ffff8880001000;thread:p1.1;", Stop{Signal: 5, Reason: "watch", Addr: 0xffff8880001000, Core: -1, Thread: Thread{ID: "p1.1", Pid: 1, Num: 1}}},
		{"W00", Stop{Exited: true, Core: -1}},
		{"W7;process:6f2b", Stop{Exited: true, ExitCode: 7, Core: -1, Thread: Thread{ID: "p6f2b", Pid: 0x6f2b, Num: -1}}},
		{"X09", Stop{Exited: true, Signal: 9, ExitCode: 137, Core: -1}},
		{"X1e", Stop{Exited: true, Signal: 30, ExitCode: 128 + 10, Core: -1}}, // gdb's SIGUSR1 is Linux's 10
	}
	for _, c := range cases {
		got, err := parseStop([]byte(c.in))
		c.want.Raw = c.in
		if err != nil || !stopEqual(got, c.want) {
			t.Errorf("%s:\n got  %+v %v\n want %+v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "T", "T0", "OK", "E22", "Tzz", "W", "T05thread:pzz;", "S05x"} {
		if _, err := parseStop([]byte(bad)); err == nil {
			t.Errorf("%q parsed as a stop", bad)
		}
	}
	if !isConsoleOutput([]byte("O48690a")) || isConsoleOutput([]byte("OK")) {
		t.Error("isConsoleOutput")
	}
}

func stopEqual(a, b Stop) bool {
	if len(a.Regs) != len(b.Regs) {
		return false
	}
	for k, v := range a.Regs {
		if b.Regs[k] != v {
			return false
		}
	}
	a.Regs, b.Regs = nil, nil
	return reflect.DeepEqual(a, b)
}

func TestSignals(t *testing.T) {
	for l := 1; l < 32; l++ {
		if l == 16 {
			continue // SIGSTKFLT: none in gdb
		}
		if back := LinuxSignal(GDBSignal(l)); back != l {
			t.Errorf("linux %d -> gdb %d -> linux %d", l, GDBSignal(l), back)
		}
	}
	if GDBSignal(10) != 30 || GDBSignal(11) != 11 || LinuxSignal(17) != 19 {
		t.Error("SIGUSR1, SIGSEGV or SIGSTOP mapped wrong")
	}
}

func TestPacketErrorText(t *testing.T) {
	err := &PacketError{Packet: "Z0,ffffffff81234567,1", Reply: "E22", Err: &ReplyError{Reply: "E22"}}
	if got, want := err.Error(), `gdb packet "Z0,ffffffff81234567,1": E22: invalid argument`; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if err.Errno() != 22 {
		t.Errorf("errno %d", err.Errno())
	}
	for reply, want := range map[string]string{
		"E14":           "E14: bad address",
		"E01":           "E01: failed",
		"E.no such sym": "error: no such sym",
	} {
		if got := (&ReplyError{Reply: reply}).Error(); got != want {
			t.Errorf("%s: %q, want %q", reply, got, want)
		}
	}
}
