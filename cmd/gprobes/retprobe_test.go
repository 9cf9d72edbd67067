package main

import (
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/internal/testkit"
)

// The example testdata/examples/write_latency.dpdf through gprobes run:
// libc's write, entry and return sharing the call's instance variables;
// the records say which probe kind made them, the summary's table shows
// the return probe's kind, HOW and DROPPED.
func TestRunWriteLatencyExample(t *testing.T) {
	src := "../../testdata/retprobe/"
	bin := testkit.CC(t, "retprobe", "-O1", "-g", "-pthread", src+"retprobe.c", src+"funcs.S")
	const n = 40
	out := mustRun(t, "run", filepath.Join(examples, "write_latency.dpdf"), "--", bin, "write", "40")
	rec := regexp.MustCompile(`(?m)\(2,2\) retprobe write 0x[0-9a-f]+ pid \d+ tid \d+ exit 1 data (-?\d+) (-?\d+) (-?\d+) (-?\d+)$`)
	fd3 := 0
	for _, m := range rec.FindAllStringSubmatch(out, -1) {
		// the words, shown as numbers (docs/api.md, "Log records")
		var w [4]int64
		for i := range w {
			w[i], _ = strconv.ParseInt(m[i+1], 10, 64)
		}
		fd, asked, got, ns := w[0], w[1], w[2], w[3]
		if got != asked || int64(ns) <= 0 || ns > 1e9 {
			t.Errorf("write(%d, %d bytes) returned %d in %d ns", fd, asked, int64(got), int64(ns))
		}
		if fd == 3 {
			fd3++
		}
	}
	if fd3 != n {
		t.Errorf("%d returns of write on fd 3, want %d:\n%s", fd3, n, out)
	}
	header := regexp.MustCompile(`(?m)^TARGET\s+MODULE\s+MINOR\s+LOCATION\s+ADDRESS\s+STATE\s+HOW\s+HITS\s+SKIPPED\s+FAULTS\s+MISSED\s+DROPPED\s+LOST\s+REASON$`)
	row := regexp.MustCompile(`(?m)^pid:\d+\s+\S+libc.so.6\s+2\s+retprobe write\s+0x[0-9a-f]+\s+gone\s+int3 ret\s+(\d+)\s+0\s+0\s+0\s+0\s+0\s`)
	if !header.MatchString(out) || !row.MatchString(out) {
		t.Errorf("the summary's table:\n%s", out[max(0, strings.Index(out, "TARGET")):])
	}
}
