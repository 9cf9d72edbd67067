package main

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// Where the live backends are not built (platform_other.go), run, daemon,
// recover and insert stop at once with the backends' error, before
// anything is started or created; the offline commands still work. The
// other OS is played here by setting liveErr.
func TestLiveCommandsWithoutBackends(t *testing.T) {
	saved := liveErr
	liveErr = errors.New("ptrace: not supported on this OS")
	defer func() { liveErr = saved }()
	dir := t.TempDir()
	sock, state := filepath.Join(dir, "sock"), filepath.Join(dir, "state")
	dpdf := filepath.Join(examples, "ls-opendir.dpdf")
	for _, args := range [][]string{
		{"run", dpdf, "--", "true"},
		{"daemon", "--socket", sock, "--state", state},
		{"recover"},
		{"insert", "--socket", sock, "--target", "pid:1", dpdf},
	} {
		out, errs, code := gprobes(t, args...)
		want := "gprobes: " + args[0] + ": ptrace: not supported on this OS\n"
		if code != 1 || out != "" || errs != want {
			t.Errorf("gprobes %v: exit %d, stdout %q, stderr %q; want exit 1 and %q", args, code, out, errs, want)
		}
	}
	for _, p := range []string{sock, state} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s was created", p)
		}
	}
	mustRun(t, "check", dpdf)
	mustRun(t, "disasm", dpdf)
}
