package platform_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/gprobes/gprobes/bpf"
	"github.com/gprobes/gprobes/coredump"
	"github.com/gprobes/gprobes/internal/platform"
	"github.com/gprobes/gprobes/kernel"
	"github.com/gprobes/gprobes/ptrace"
	"github.com/gprobes/gprobes/xen"
)

// TestOneErrNotSupported checks that every backend's ErrNotSupported is
// the one platform.ErrNotSupported: an error of any of them, wrapped as a
// caller wraps it, answers errors.Is for each of the others.
func TestOneErrNotSupported(t *testing.T) {
	backends := []struct {
		name string
		err  error
	}{
		{"ptrace", ptrace.ErrNotSupported},
		{"xen", xen.ErrNotSupported},
		{"coredump", coredump.ErrNotSupported},
		{"bpf", bpf.ErrNotSupported},
		{"kernel", kernel.ErrNotSupported},
	}
	for _, from := range backends {
		if from.err == nil {
			t.Fatalf("%s.ErrNotSupported is nil", from.name)
		}
		got := fmt.Errorf("gprobes: attach 1234: %w", from.err)
		if !errors.Is(got, platform.ErrNotSupported) {
			t.Errorf("errors.Is(%s's error, platform.ErrNotSupported) is false: %s declares its own", from.name, from.name)
		}
		for _, as := range backends {
			if !errors.Is(got, as.err) {
				t.Errorf("errors.Is(%s's error, %s.ErrNotSupported) is false", from.name, as.name)
			}
		}
	}
	if errors.Is(errors.New(platform.ErrNotSupported.Error()), platform.ErrNotSupported) {
		t.Error("an error of the same text is ErrNotSupported: errors.Is compares nothing")
	}
}
