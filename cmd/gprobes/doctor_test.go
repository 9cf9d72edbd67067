package main

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/bpf"
)

// TestDoctor: gprobes doctor prints the matrix bpf.Detect finds, every
// ability and, for each the host lacks, its reason; --json the same as
// JSON. (bpf's TestAbilities checks the answers against the kernel's.)
func TestDoctor(t *testing.T) {
	want := bpf.Detect()
	var got bpf.Report
	if err := json.Unmarshal([]byte(mustRun(t, "doctor", "--json")), &got); err != nil {
		t.Fatal(err)
	}
	if got.OS != runtime.GOOS || got.Kernel != want.Kernel || len(got.Abilities) != len(want.Abilities) || len(got.Abilities) < 17 {
		t.Fatalf("doctor --json: %+v\nwant %+v", got, want)
	}
	for i, a := range got.Abilities {
		w := want.Abilities[i]
		if a.Name != w.Name || a.OK != w.OK || a.For != w.For || a.OK != (a.Why == "") {
			t.Errorf("ability %d: %+v, want %+v", i, a, w)
		}
	}
	out := mustRun(t, "doctor")
	t.Logf("\n%s", out)
	if !strings.HasPrefix(out, "host: "+runtime.GOOS) || !strings.Contains(out, "\nABILITY ") {
		t.Errorf("doctor:\n%s", out)
	}
	for _, a := range want.Abilities {
		here := "yes"
		if !a.OK {
			here = "no"
			if !strings.Contains(out, "\n  "+a.Name+": "+a.Why+"\n") {
				t.Errorf("no reason for %s in:\n%s", a.Name, out)
			}
		}
		if !strings.Contains(out, "\n"+a.Name+" ") || !strings.Contains(out, " "+here+" ") {
			t.Errorf("no line for %s (%s) in:\n%s", a.Name, here, out)
		}
	}
}
