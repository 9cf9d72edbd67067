package bpf_test

import (
	"bufio"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gprobes/gprobes/bpf"
)

// The follow set, in the kernel: a process's child goes in as it is
// started, and both come out when they end, as the kernel's tracepoints
// see them (no part of it in gprobes).
func TestFollowForkAndExit(t *testing.T) {
	needBPF(t)
	sh := exec.Command("sh", "-c", "read x; sleep 600 & echo $!; wait")
	in, _ := sh.StdinPipe()
	outp, _ := sh.StdoutPipe()
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sh.Process.Kill(); sh.Wait() })
	f, err := bpf.NewFollow(uint32(sh.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	has := func(pid int) bool {
		var v uint8
		return f.Map.Lookup(uint32(pid), &v) == nil
	}
	fmt.Fprintln(in) // now it starts the sleep
	sc := bufio.NewScanner(outp)
	if !sc.Scan() {
		t.Fatalf("the shell said nothing: %v", sc.Err())
	}
	child, err := strconv.Atoi(strings.TrimSpace(sc.Text()))
	if err != nil {
		t.Fatalf("the shell said %q", sc.Text())
	}
	if !has(sh.Process.Pid) || !has(child) {
		t.Fatalf("the set lacks the shell %d (%v) or its child %d (%v)", sh.Process.Pid, has(sh.Process.Pid), child, has(child))
	}
	// an unrelated process started meanwhile is not in it
	other := exec.Command("sleep", "600")
	other.Start()
	defer func() { other.Process.Kill(); other.Wait() }()
	if has(other.Process.Pid) {
		t.Errorf("an unrelated process %d is in the set", other.Process.Pid)
	}
	exec.Command("kill", strconv.Itoa(child)).Run()
	sh.Wait()
	deadline := time.Now().Add(time.Minute)
	for has(child) || has(sh.Process.Pid) {
		if time.Now().After(deadline) {
			t.Fatalf("a minute after both ended the set still has the shell (%v) or its child (%v)", has(sh.Process.Pid), has(child))
		}
		time.Sleep(10 * time.Millisecond)
	}
	var k uint32
	var v uint8
	if it := f.Map.Iterate(); it.Next(&k, &v) {
		t.Errorf("the set still holds %d", k)
	}
	if f.Full() != 0 {
		t.Errorf("full %d", f.Full())
	}
}
