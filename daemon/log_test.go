package daemon

import (
	"encoding/json"
	"testing"
	"time"
)

func sampleLines() []LogLine {
	t := time.Date(2026, 11, 22, 10, 0, 1, 123456789, time.UTC)
	return []LogLine{
		{Time: t, Kind: "log", Target: "pid:1", Module: "/lib/libc.so.6", Major: 1, Minor: 2, Location: "malloc+0x1c",
			Address: "0x7f00", Pid: 1, Tid: 2, CPU: 3, Exit: 1, Data: "00ff", Truncated: true},
		{Time: t.In(time.FixedZone("x", 3600)), Kind: "exception", Module: "a\"b\\c<d>&\n\t\x01é\u2028", Location: "f",
			Exception: "invalid-address", PC: 12, Line: "p.dpdf:3", Dump: "/d", Debugger: "gdb -p 1"},
		{Time: t, Kind: "log", Module: "m", Location: "write", Probe: "retprobe", Address: "0x7f10", Exit: 1},
		{Time: t, Kind: "log", Target: "host", Module: "/usr/bin/python3", Location: "main", Pid: 5, Tid: 6, Comm: "py\"th<on>", Exit: 1},
		{},
	}
}

// The hand-written encoder writes exactly what encoding/json writes.
func TestAppendJSONMatchesEncodingJSON(t *testing.T) {
	for _, l := range sampleLines() {
		want, err := json.Marshal(&l)
		if err != nil {
			t.Fatal(err)
		}
		if got := l.AppendJSON(nil); string(got) != string(want) {
			t.Errorf("got  %s\nwant %s", got, want)
		}
	}
}

func BenchmarkLogLine(b *testing.B) {
	l := sampleLines()[0]
	b.Run("AppendJSON", func(b *testing.B) {
		var buf []byte
		for i := 0; i < b.N; i++ {
			buf = l.AppendJSON(buf[:0])
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			json.Marshal(&l)
		}
	})
}
