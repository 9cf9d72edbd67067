//go:build linux

package bpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// tracefsRoots are where tracefs is found: its own mount point, and the
// older one under debugfs.
var tracefsRoots = []string{"/sys/kernel/tracing", "/sys/kernel/debug/tracing"}

// EventsDir is tracefs's events directory (/sys/kernel/tracing/events),
// tracefs mounted first when it is not.
func EventsDir() (string, error) { return eventsDir() }

// eventsDir returns tracefs's events directory, mounting tracefs first
// (EnsureTracefs) when none is mounted.
func eventsDir() (string, error) {
	for _, r := range tracefsRoots {
		if st, err := os.Stat(filepath.Join(r, "events")); err == nil && st.IsDir() {
			return filepath.Join(r, "events"), nil
		}
	}
	if err := EnsureTracefs(); err != nil {
		return "", err
	}
	for _, r := range tracefsRoots {
		if st, err := os.Stat(filepath.Join(r, "events")); err == nil && st.IsDir() {
			return filepath.Join(r, "events"), nil
		}
	}
	return "", errors.New("tracefs has no events directory (a kernel without CONFIG_EVENT_TRACING?)")
}

var eventName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)

// ReadFormat reads and parses the format of the tracepoint group:event
// from tracefs (events/GROUP/EVENT/format). An event that does not exist
// is "no such tracepoint GROUP:EVENT", with the closest names of its
// subsystem (or the closest subsystems) when there are some.
func ReadFormat(group, event string) (*Format, error) {
	name := group + ":" + event
	if !eventName.MatchString(group) || !eventName.MatchString(event) {
		return nil, fmt.Errorf("no such tracepoint %s: not a tracepoint name", name)
	}
	dir, err := eventsDir()
	if err != nil {
		return nil, fmt.Errorf("tracepoint %s: %w", name, err)
	}
	text, err := os.ReadFile(filepath.Join(dir, group, event, "format"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, noSuchEvent(dir, group, event)
	}
	if err != nil {
		return nil, fmt.Errorf("tracepoint %s: %w", name, err)
	}
	return ParseFormat(group, event, text)
}

func noSuchEvent(dir, group, event string) error {
	msg := "no such tracepoint " + group + ":" + event
	ents, err := os.ReadDir(filepath.Join(dir, group))
	if err != nil {
		// the subsystem itself is missing: the closest subsystems
		if all, err := os.ReadDir(dir); err == nil {
			if c := closest(group, dirNames(all)); len(c) > 0 {
				msg += fmt.Sprintf(" (no subsystem %s; did you mean %s?)", group, strings.Join(c, " or "))
			} else {
				msg += " (no subsystem " + group + ")"
			}
		}
		return errors.New(msg)
	}
	names := dirNames(ents)
	c := closest(event, names)
	if len(c) == 0 {
		// a name sharing the event's first word: sys_enter_openat2 for sys_enter_open
		for _, n := range names {
			if strings.HasPrefix(n, event) || strings.HasPrefix(event, n) {
				c = append(c, group+":"+n)
			}
		}
		sort.Strings(c)
		if len(c) > 3 {
			c = c[:3]
		}
	} else {
		for i := range c {
			c[i] = group + ":" + c[i]
		}
	}
	if len(c) > 0 {
		msg += fmt.Sprintf(" (did you mean %s?)", strings.Join(c, " or "))
	}
	return errors.New(msg)
}

func dirNames(ents []os.DirEntry) []string {
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
}
