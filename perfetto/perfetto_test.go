package perfetto_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"

	"github.com/gprobes/gprobes/internal/testkit"
	"github.com/gprobes/gprobes/internal/tracecheck"
	"github.com/gprobes/gprobes/perfetto"
	"github.com/gprobes/gprobes/timeline"
)

// The synthetic records decode, field by field, to exactly what was
// written.
func TestDecode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.pftrace")
	w, err := perfetto.Create(path, timeline.Options{OnLost: func(r *timeline.Record, err error) { t.Errorf("lost: %v", err) }})
	if err != nil {
		t.Fatal(err)
	}
	tee := tracecheck.Synthetic(w)
	if err := tee.Close(); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(path); st.Size() < 2*perfetto.ChunkSize {
		t.Fatalf("%d bytes: not several chunks", st.Size())
	}
	tracecheck.Perfetto(t, path, tee.Events, tee.Losses)
	// and read back as records, every field equal
	evs, losses := tracecheck.ReadPerfetto(t, path)
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

// A chunk the file does not take loses its records, each told to OnLost.
func TestLostChunk(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		testkit.SkipOrFail(t, "no /dev/full: %v", err)
	}
	lost := 0
	w, err := perfetto.Create("/dev/full", timeline.Options{OnLost: func(r *timeline.Record, err error) {
		if !errors.Is(err, syscall.ENOSPC) {
			t.Errorf("lost for %v", err)
		}
		lost++
	}})
	if err != nil {
		t.Fatal(err)
	}
	tee := tracecheck.Synthetic(w)
	if err := tee.Close(); err == nil {
		t.Error("Close on /dev/full succeeded")
	}
	if lost != len(tee.Events) {
		t.Errorf("%d records told lost, want %d", lost, len(tee.Events))
	}
}

// Read never panics and fails on what is not a trace.
func FuzzRead(f *testing.F) {
	path := filepath.Join(f.TempDir(), "t")
	w, _ := perfetto.Create(path, timeline.Options{})
	tracecheck.Synthetic(w).Close()
	b, _ := os.ReadFile(path)
	f.Add(b[:4096])
	f.Add([]byte{0x0a, 0x05, 0x50, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		packets, err := perfetto.Read(b)
		if err == nil {
			perfetto.Resolve(packets)
		}
	})
}
