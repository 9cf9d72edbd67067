package ctf

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/timeline"
)

// BenchmarkWriterBurst writes records of the burst's shape (a probe
// logging two words, 4 threads) as CTF packets: the cost a CTF log would
// have on the daemon's write path, against the binary log's (daemon
// BenchmarkLogRead/WriteBatch). docs/records.md, "The log file".
func BenchmarkWriterBurst(b *testing.B) {
	const n = 100000
	recs := make([]timeline.Record, n)
	t0 := time.Now()
	for i := range recs {
		d := make([]byte, 16)
		binary.LittleEndian.PutUint64(d, uint64(i))
		binary.LittleEndian.PutUint64(d[8:], uint64(i%4))
		recs[i] = timeline.Record{Target: "pid:4242", Record: probe.Record{Time: t0.Add(time.Duration(i)), Kind: probe.RecordLog, Module: "/tmp/burst",
			Minor: 1, Location: "hot", Address: 0x401136, Pid: 4242, Tid: 4243 + i%4, CPU: i % 2, Exit: 1, Data: d}}
	}
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	var size int64
	for i := 0; i < b.N; i++ {
		dir := filepath.Join(b.TempDir(), "t")
		w, err := Create(dir, timeline.Options{})
		if err != nil {
			b.Fatal(err)
		}
		for j := range recs {
			w.Event(timeline.Event{Record: &recs[j]})
		}
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
		ents, _ := os.ReadDir(dir)
		size = 0
		for _, e := range ents {
			fi, _ := e.Info()
			size += fi.Size()
		}
	}
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	b.ReportMetric(float64(n*b.N)/cpu.Seconds(), "records/cpu-s")
	b.ReportMetric(float64(size)/n, "bytes/record")
	b.ReportMetric(0, "ns/op")
}
