//go:build linux

package bpf_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/bpf"
	"github.com/gprobes/gprobes/internal/testkit"
)

// The live formats of this kernel: the ones the parser's tests copied
// read the same (when this is the kernel they came from), every event's
// format parses, and unknown events are named.
func TestReadFormat(t *testing.T) {
	f, err := bpf.ReadFormat("syscalls", "sys_enter_getppid")
	if err != nil {
		testkit.SkipOrFail(t, "%v", err)
	}
	if fd, err := f.Field("__syscall_nr"); err != nil || fd.Offset != 8 || fd.Size != 4 || !fd.Signed {
		t.Fatalf("__syscall_nr: %+v %v", fd, err)
	}
	files, _ := filepath.Glob("testdata/tracefmt/*")
	for _, p := range files {
		g, e, _ := strings.Cut(filepath.Base(p), "_")
		live, err := bpf.ReadFormat(g, e)
		if err != nil {
			t.Logf("%s:%s: %v", g, e, err)
			continue
		}
		if copied := readTestFormat(t, g, e); reflect.DeepEqual(live.Fields, copied.Fields) {
			t.Logf("%s: as copied", live.Name())
		} else {
			t.Logf("%s: differs from the copy (another kernel)", live.Name())
		}
	}
	// every format of this kernel parses
	dir := "/sys/kernel/tracing/events"
	if _, err := os.Stat(dir); err != nil {
		dir = "/sys/kernel/debug/tracing/events"
	}
	all, _ := filepath.Glob(filepath.Join(dir, "*", "*", "format"))
	kinds := map[bpf.FieldKind]int{}
	for _, p := range all {
		e := filepath.Base(filepath.Dir(p))
		g := filepath.Base(filepath.Dir(filepath.Dir(p)))
		f, err := bpf.ReadFormat(g, e)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		for _, fd := range f.Fields {
			kinds[fd.Kind]++
		}
	}
	t.Logf("%d events parsed; fields by kind: %v", len(all), kinds)

	for _, c := range []struct{ group, event, want string }{
		{"syscalls", "sys_enter_getppd", "no such tracepoint syscalls:sys_enter_getppd (did you mean syscalls:sys_enter_getpid or syscalls:sys_enter_getppid?)"},
		{"sched", "no_such_event_at_all", "no such tracepoint sched:no_such_event_at_all"},
		{"schde", "sched_switch", "no such tracepoint schde:sched_switch (no subsystem schde; did you mean sched?)"},
		{"sched", "../sched/sched_switch", "no such tracepoint sched:../sched/sched_switch: not a tracepoint name"},
	} {
		_, err := bpf.ReadFormat(c.group, c.event)
		if err == nil || err.Error() != c.want {
			t.Errorf("%s:%s: %v, want %q", c.group, c.event, err, c.want)
		}
	}
}
