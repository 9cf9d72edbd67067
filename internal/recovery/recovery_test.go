package recovery

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gprobes/gprobes/internal/testkit"
)

func TestStartTime(t *testing.T) {
	if runtime.GOOS != "linux" {
		testkit.SkipOrFail(t, "/proc is Linux's, this is %s", runtime.GOOS)
	}
	st, ok := StartTime(os.Getpid())
	if !ok || st == 0 || !Running(os.Getpid(), st) || Running(os.Getpid(), st+1) {
		t.Fatalf("StartTime(self) = %d %v", st, ok)
	}
	// a child that exited and is not reaped yet is a zombie: gone
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 && strings.HasPrefix(string(b[i+1:]), " Z") {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the child never became a zombie")
		}
	}
	if _, ok := StartTime(pid); ok {
		t.Errorf("a zombie (pid %d) counts as running", pid)
	}
	cmd.Wait()
	if _, ok := StartTime(pid); ok {
		t.Errorf("a reaped process (pid %d) counts as running", pid)
	}
}

func TestWriteRead(t *testing.T) {
	path := t.TempDir() + "/j.json"
	type rec struct{ A, B int }
	if err := Write(path, rec{1, 2}); err != nil {
		t.Fatal(err)
	}
	var got rec
	if err := Read(path, &got); err != nil || got != (rec{1, 2}) {
		t.Fatalf("Read: %+v %v", got, err)
	}
	if _, err := os.Stat(path + ".new"); err == nil {
		t.Error("the temporary file is left behind")
	}
	os.WriteFile(path, []byte("{"), 0o600)
	if err := Read(path, &got); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("a torn journal: %v", err)
	}
}
