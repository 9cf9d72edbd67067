package ctf_test

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/gprobes/gprobes/ctf"
	"github.com/gprobes/gprobes/internal/testkit"
	"github.com/gprobes/gprobes/internal/tracecheck"
	"github.com/gprobes/gprobes/timeline"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// babeltrace2 reads back every event of the synthetic records exactly,
// with the slices' entry and return events and the discarded count.
func TestBabeltrace(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "trace")
	w, err := ctf.Create(dir, timeline.Options{OnLost: func(r *timeline.Record, err error) { t.Errorf("lost: %v", err) }})
	if err != nil {
		t.Fatal(err)
	}
	tee := tracecheck.Synthetic(w)
	if err := tee.Close(); err != nil {
		t.Fatal(err)
	}
	// several packets in the busy streams
	st, err := os.Stat(filepath.Join(dir, "stream_0"))
	if err != nil || st.Size() < 2*ctf.PacketSize {
		t.Fatalf("stream_0: %v %v", st, err)
	}
	tracecheck.CTF(t, dir, tee.Events, tee.Losses)
	// and read back as records, every field equal
	evs, losses := tracecheck.ReadCTF(t, dir)
	tracecheck.Same(t, "read back", evs, tee.Events)
	if !reflect.DeepEqual(losses, tee.Losses) {
		for i := range losses {
			losses[i].Time = tee.Losses[i].Time // the later of its own and the last record's
		}
		if !reflect.DeepEqual(losses, tee.Losses) {
			t.Errorf("losses %+v, want %+v", losses, tee.Losses)
		}
	}
}

// A trace goes into a new or empty directory only.
func TestCreateRefusesAFullDirectory(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "x"), nil, 0o644)
	if _, err := ctf.Create(dir, timeline.Options{}); err == nil {
		t.Error("Create wrote into a directory with a file in it")
	}
}
