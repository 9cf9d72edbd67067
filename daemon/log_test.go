package daemon

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gprobes/gprobes/probe"
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

// A record goes through the binary log unchanged: each field, its data
// and address as FromRecord writes them or any other string, its stacks;
// its time as the same instant, in the reader's zone.
func TestBinaryLogRoundTrip(t *testing.T) {
	lines := sampleLines()
	lines = append(lines,
		LogLine{Time: time.Unix(5, 6), Kind: "log", Target: "kernel", Module: "k", Location: "f", Address: "0x0", Data: "ABC", Exit: 1},
		LogLine{Time: time.Unix(7, 8), Kind: "log", Module: "m", Location: "f", Address: "0x00ff", Data: "0102", Exit: 2,
			Stacks: []probe.Stack{{Kind: "user", Frames: []probe.Frame{{Address: 0x401000, Function: "main", Offset: 12, Module: "/bin/x"}, {Address: 0x7f00}}}, {Kind: "kernel"}}})
	var e frameEncoder
	e.reset()
	for i := range lines {
		e.add(&lines[i])
	}
	frame := e.appendFrame(nil)
	var out bytes.Buffer
	var n uint64
	path := filepath.Join(t.TempDir(), "log.bin")
	os.WriteFile(path, append(fileHeader(), frame...), 0o600)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, torn, err := copyRecords(&out, f, 0, -1, &n); err != nil || torn != "" || n != uint64(len(lines)) {
		t.Fatalf("%d records, %q, %v", n, torn, err)
	}
	got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	for i, l := range lines {
		if !l.Time.IsZero() {
			l.Time = l.Time.Local()
		}
		if want := string(l.AppendJSON(nil)); got[i] != want {
			t.Errorf("record %d:\ngot  %s\nwant %s", i, got[i], want)
		}
	}
}

// burstLines are n records as the burst's probe commits them: two words.
func burstLines(n int) []LogLine {
	ls := make([]LogLine, n)
	t0 := time.Now()
	for i := range ls {
		d := make([]byte, 16)
		binary.LittleEndian.PutUint64(d, uint64(i))
		binary.LittleEndian.PutUint64(d[8:], uint64(i%4))
		ls[i] = FromRecord("pid:4242", &probe.Record{Time: t0.Add(time.Duration(i)), Kind: probe.RecordLog, Module: "/tmp/burst", Minor: 1,
			Location: "hot", Address: 0x401136, Pid: 4242, Tid: 4243 + i%4, CPU: i % 2, Exit: 1, Data: d})
	}
	return ls
}

// BenchmarkLogRead is the rate of formatting at read time: the binary
// log's records of the burst's shape to JSON lines (what gprobes log
// --json and the log stream of the API are made of), one core; and
// WriteBatch's rate of encoding and writing them.
func BenchmarkLogRead(b *testing.B) {
	const n = 100000
	dir := b.TempDir()
	w, err := OpenLog(dir, LogOptions{})
	if err != nil {
		b.Fatal(err)
	}
	ls := burstLines(n)
	for i := 0; i < n; i += 1024 {
		w.WriteBatch(ls[i:min(i+1024, n)])
	}
	w.Close()
	f, err := os.Open(filepath.Join(dir, LogFileName))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	b.Run("JSON", func(b *testing.B) {
		start, cpu := time.Now(), cpuTime()
		for i := 0; i < b.N; i++ {
			var got uint64
			if _, _, err := copyRecords(io.Discard, f, 0, -1, &got); err != nil || got != n {
				b.Fatal(got, err)
			}
		}
		b.ReportMetric(float64(n*b.N)/time.Since(start).Seconds(), "records/s")
		b.ReportMetric(float64(n*b.N)/(cpuTime()-cpu).Seconds(), "records/cpu-s")
		b.ReportMetric(0, "ns/op")
	})
	b.Run("WriteBatch", func(b *testing.B) {
		w, err := OpenLog(b.TempDir(), LogOptions{MaxSize: 1 << 30})
		if err != nil {
			b.Fatal(err)
		}
		defer w.Close()
		start, cpu := time.Now(), cpuTime()
		for i := 0; i < b.N; i++ {
			for j := 0; j < n; j += 1024 {
				w.WriteBatch(ls[j:min(j+1024, n)])
			}
		}
		b.ReportMetric(float64(n*b.N)/time.Since(start).Seconds(), "records/s")
		b.ReportMetric(float64(n*b.N)/(cpuTime()-cpu).Seconds(), "records/cpu-s")
		b.ReportMetric(float64(w.Status().LogSize)/float64(n*b.N), "bytes/record")
		b.ReportMetric(0, "ns/op")
	})
}

// cpuTime is the CPU time (user and system) this process has used: the
// rate per CPU second is what one core does, on a machine whose other
// jobs take the CPUs from the benchmark part of the time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
