package gdbremote

import (
	"errors"
	"fmt"
	"testing"
)

// Z2/Z4 and z2/z4 as sent, the watch stop as parsed, and a stub without
// watchpoints (gdbsx) as ErrUnsupported.
func TestWatchpoints(t *testing.T) {
	s := newFakeStub(t)
	s.override["Z2,ffffffff82001000,8"] = "OK"
	s.override["z2,ffffffff82001000,8"] = "OK"
	s.override["Z4,ffffffff82001008,4"] = "OK"
	s.override["Z3,ffffffff82001008,4"] = "E22"
	c, err := s.start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetWatchpoint(WatchWrite, 0xffffffff82001000, 8); err != nil {
		t.Fatal(err)
	}
	if err := c.SetWatchpoint(WatchAccess, 0xffffffff82001008, 4); err != nil {
		t.Fatal(err)
	}
	err = c.SetWatchpoint(WatchRead, 0xffffffff82001008, 4)
	if got := fmt.Sprint(err); got != `gdb packet "Z3,ffffffff82001008,4": E22: invalid argument` {
		t.Errorf("Z3: %s", got)
	}
	if err := c.Continue(nil, 0); err != nil {
		t.Fatal(err)
	}
	s.stopNow <- "T05thread:p01.02;awatch:ffffffff82001008;"
	st, err := c.Wait(t.Context())
	if err != nil || st.Reason != "awatch" || st.Addr != 0xffffffff82001008 || st.Thread.Num != 2 || st.Signal != SigTrap {
		t.Fatalf("stop %+v %v", st, err)
	}
	if err := c.ClearWatchpoint(WatchWrite, 0xffffffff82001000, 8); err != nil {
		t.Fatal(err)
	}

	g := newFakeStub(t)
	g.noZ = true
	c, err = g.start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = c.SetWatchpoint(WatchWrite, 0x1000, 4)
	if !errors.Is(err, ErrUnsupported) || fmt.Sprint(err) != `gdb packet "Z2,1000,4": not supported by the stub (empty reply)` {
		t.Errorf("a stub without watchpoints: %v", err)
	}
}
