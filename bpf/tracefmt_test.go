package bpf_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/bpf"
)

// readTestFormat parses testdata/tracefmt/GROUP_EVENT, a format file
// copied from a 6.18 kernel's tracefs.
func readTestFormat(t *testing.T, group, event string) *bpf.Format {
	t.Helper()
	text, err := os.ReadFile(filepath.Join("testdata", "tracefmt", group+"_"+event))
	if err != nil {
		t.Fatal(err)
	}
	f, err := bpf.ParseFormat(group, event, text)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

var commonFields = []bpf.Field{
	{Name: "common_type", Type: "unsigned short", Offset: 0, Size: 2, Kind: bpf.FieldScalar, Common: true},
	{Name: "common_flags", Type: "unsigned char", Offset: 2, Size: 1, Kind: bpf.FieldScalar, Common: true},
	{Name: "common_preempt_count", Type: "unsigned char", Offset: 3, Size: 1, Kind: bpf.FieldScalar, Common: true},
	{Name: "common_pid", Type: "int", Offset: 4, Size: 4, Signed: true, Kind: bpf.FieldScalar, Common: true},
}

func TestParseFormat(t *testing.T) {
	for _, c := range []struct {
		group, event string
		id           uint32
		fields       []bpf.Field // less the common ones
	}{
		{"sched", "sched_switch", 372, []bpf.Field{
			{Name: "prev_comm", Type: "char[16]", Offset: 8, Size: 16, Kind: bpf.FieldArray},
			{Name: "prev_pid", Type: "pid_t", Offset: 24, Size: 4, Signed: true, Kind: bpf.FieldScalar},
			{Name: "prev_prio", Type: "int", Offset: 28, Size: 4, Signed: true, Kind: bpf.FieldScalar},
			{Name: "prev_state", Type: "long", Offset: 32, Size: 8, Signed: true, Kind: bpf.FieldScalar},
			{Name: "next_comm", Type: "char[16]", Offset: 40, Size: 16, Kind: bpf.FieldArray},
			{Name: "next_pid", Type: "pid_t", Offset: 56, Size: 4, Signed: true, Kind: bpf.FieldScalar},
			{Name: "next_prio", Type: "int", Offset: 60, Size: 4, Signed: true, Kind: bpf.FieldScalar},
		}},
		{"syscalls", "sys_enter_openat", 782, []bpf.Field{
			{Name: "__syscall_nr", Type: "int", Offset: 8, Size: 4, Signed: true, Kind: bpf.FieldScalar},
			{Name: "dfd", Type: "int", Offset: 16, Size: 8, Kind: bpf.FieldScalar},
			{Name: "filename", Type: "const char *", Offset: 24, Size: 8, Kind: bpf.FieldPointer},
			{Name: "flags", Type: "int", Offset: 32, Size: 8, Kind: bpf.FieldScalar},
			{Name: "mode", Type: "umode_t", Offset: 40, Size: 8, Kind: bpf.FieldScalar},
		}},
		{"kvm", "kvm_pio", 110, []bpf.Field{
			{Name: "rw", Type: "unsigned int", Offset: 8, Size: 4, Kind: bpf.FieldScalar},
			{Name: "port", Type: "unsigned int", Offset: 12, Size: 4, Kind: bpf.FieldScalar},
			{Name: "size", Type: "unsigned int", Offset: 16, Size: 4, Kind: bpf.FieldScalar},
			{Name: "count", Type: "unsigned int", Offset: 20, Size: 4, Kind: bpf.FieldScalar},
			{Name: "val", Type: "unsigned int", Offset: 24, Size: 4, Kind: bpf.FieldScalar},
		}},
		{"sched", "sched_process_exec", 365, []bpf.Field{
			{Name: "filename", Type: "__data_loc char[]", Offset: 8, Size: 4, Kind: bpf.FieldDataLoc},
			{Name: "pid", Type: "pid_t", Offset: 12, Size: 4, Signed: true, Kind: bpf.FieldScalar},
			{Name: "old_pid", Type: "pid_t", Offset: 16, Size: 4, Signed: true, Kind: bpf.FieldScalar},
		}},
		{"ipi", "ipi_send_cpumask", 353, []bpf.Field{
			{Name: "cpumask", Type: "__data_loc cpumask_t", Offset: 8, Size: 4, Kind: bpf.FieldDataLoc},
			{Name: "callsite", Type: "void *", Offset: 16, Size: 8, Kind: bpf.FieldPointer},
			{Name: "callback", Type: "void *", Offset: 24, Size: 8, Kind: bpf.FieldPointer},
		}},
		{"bridge", "br_fdb_add", 2258, []bpf.Field{
			{Name: "ndm_flags", Type: "u8", Offset: 8, Size: 1, Kind: bpf.FieldScalar},
			{Name: "dev", Type: "__data_loc char[]", Offset: 12, Size: 4, Kind: bpf.FieldDataLoc},
			{Name: "addr", Type: "unsigned char[6]", Offset: 16, Size: 6, Kind: bpf.FieldArray},
			{Name: "vid", Type: "u16", Offset: 22, Size: 2, Kind: bpf.FieldScalar},
			{Name: "nlh_flags", Type: "u16", Offset: 24, Size: 2, Kind: bpf.FieldScalar},
		}},
		{"syscalls", "sys_enter_getppid", 305, []bpf.Field{
			{Name: "__syscall_nr", Type: "int", Offset: 8, Size: 4, Signed: true, Kind: bpf.FieldScalar},
		}},
	} {
		f := readTestFormat(t, c.group, c.event)
		want := &bpf.Format{Group: c.group, Event: c.event, ID: c.id, Fields: append(append([]bpf.Field{}, commonFields...), c.fields...)}
		if !reflect.DeepEqual(f, want) {
			t.Errorf("%s:%s:\n got %+v\nwant %+v", c.group, c.event, f, want)
		}
	}
	// dma_map_sg: __data_loc arrays of other types, a bool, an enum
	f := readTestFormat(t, "dma", "dma_map_sg")
	for name, want := range map[string]bpf.Field{
		"phys_addrs": {Name: "phys_addrs", Type: "__data_loc u64[]", Offset: 24, Size: 4, Kind: bpf.FieldDataLoc},
		"lengths":    {Name: "lengths", Type: "__data_loc unsigned int[]", Offset: 32, Size: 4, Kind: bpf.FieldDataLoc},
		"truncated":  {Name: "truncated", Type: "bool", Offset: 20, Size: 1, Kind: bpf.FieldScalar},
		"dir":        {Name: "dir", Type: "enum dma_data_direction", Offset: 36, Size: 4, Kind: bpf.FieldScalar},
	} {
		got, err := f.Field(name)
		if err != nil || *got != want {
			t.Errorf("dma_map_sg %s: %+v %v, want %+v", name, got, err, want)
		}
	}
}

// Lines other kernels write: __rel_loc, "field special:", an inline value
// of an odd size, and what is refused.
func TestParseFormatOdd(t *testing.T) {
	text := "name: odd\nID: 7\nformat:\n" +
		"\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n" +
		"\tfield special:const char * str;\toffset:8;\tsize:8;\tsigned:0;\n" +
		"\tfield:__rel_loc char[] rel;\toffset:16;\tsize:4;\tsigned:0;\n" +
		"\tfield:struct in6_addr saddr;\toffset:20;\tsize:16;\tsigned:0;\n" +
		"\tfield:u8 tail[sizeof(struct foo)];\toffset:36;\tsize:3;\tsigned:0;\n" +
		"\nprint fmt: \"%s\", REC->str\n"
	f, err := bpf.ParseFormat("g", "odd", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bpf.FieldKind{}
	for _, fd := range f.Fields {
		kinds[fd.Name] = fd.Kind
	}
	want := map[string]bpf.FieldKind{"common_type": bpf.FieldScalar, "str": bpf.FieldPointer, "rel": bpf.FieldRelLoc, "saddr": bpf.FieldArray, "tail": bpf.FieldArray}
	if !reflect.DeepEqual(kinds, want) || f.ID != 7 {
		t.Fatalf("kinds %v id %d, want %v", kinds, f.ID, want)
	}
	for _, bad := range []string{
		"name: x\nformat:\n\tfield:int a;\toffset:8;\tsize:4;\tsigned:1;\n", // no ID
		"ID: 1\nformat:\n", // no fields
		"ID: 1\nformat:\n\tfield:int a;\toffset:8;\tsize:4;\tsigned:1;\n\tfield:int a;\toffset:12;\tsize:4;\tsigned:1;\n", // twice
		"ID: 1\nformat:\n\tfield:__data_loc char[] s;\toffset:8;\tsize:8;\tsigned:0;\n",                                   // data_loc not u32
		"ID: 1\nformat:\n\tfield:int a; offset:x;\n",                                                                      // unreadable
	} {
		if _, err := bpf.ParseFormat("g", "e", []byte(bad)); err == nil || !strings.Contains(err.Error(), "g:e") {
			t.Errorf("%q: error %v", bad, err)
		}
	}
}

func TestFormatField(t *testing.T) {
	f := readTestFormat(t, "sched", "sched_switch")
	if fd, err := f.Field("next_pid"); err != nil || fd.Offset != 56 {
		t.Fatalf("next_pid: %+v %v", fd, err)
	}
	_, err := f.Field("next_pd")
	want := `tracepoint sched:sched_switch has no field "next_pd" (did you mean next_pid?); its fields: prev_comm, prev_pid, prev_prio, prev_state, next_comm, next_pid, next_prio (and common_type, common_flags, common_preempt_count, common_pid)`
	if err == nil || err.Error() != want {
		t.Fatalf("error\n %v\nwant\n %s", err, want)
	}
	_, err = readTestFormat(t, "syscalls", "sys_enter_getppid").Field("pid")
	want = `tracepoint syscalls:sys_enter_getppid has no field "pid" (did you mean common_pid?); its fields: __syscall_nr (and common_type, common_flags, common_preempt_count, common_pid)`
	if err == nil || err.Error() != want {
		t.Fatalf("error\n %v\nwant\n %s", err, want)
	}
	if got := f.FieldNames(); len(got) != 11 || got[0] != "prev_comm" || got[7] != "common_type" {
		t.Fatalf("names %v", got)
	}
}
