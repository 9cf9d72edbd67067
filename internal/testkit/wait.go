package testkit

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Until polls cond until it holds and returns nil, or returns an error
// once timeout has passed: "WHAT: not after T (N checks); last seen: S".
// cond says whether the condition holds and what it saw, for that
// message. The first checks come fast (1 ms apart, doubling up to 50 ms),
// so a generous timeout costs nothing when the condition comes at once.
//
// This is how a test waits: for the condition it needs (a line, a state,
// a pid gone), never for a fixed time, which on a loaded machine or under
// TCG is a coin toss; and when the deadline passes, it says what it saw.
func Until(timeout time.Duration, what string, cond func() (bool, string)) error {
	start := time.Now()
	deadline := start.Add(timeout)
	pause := time.Millisecond
	for n := 1; ; n++ {
		ok, seen := cond()
		if ok {
			return nil
		}
		if !time.Now().Before(deadline) {
			msg := fmt.Sprintf("%s: not after %v (%d checks)", what, time.Since(start).Round(time.Millisecond), n)
			if seen = strings.TrimRight(seen, "\n"); seen != "" {
				if strings.Contains(seen, "\n") {
					msg += "; last seen:\n" + seen
				} else {
					msg += "; last seen: " + seen
				}
			}
			return fmt.Errorf("%s", msg)
		}
		time.Sleep(min(pause, time.Until(deadline)+time.Millisecond))
		pause = min(2*pause, 50*time.Millisecond)
	}
}

// Wait is Until for a test: it fails the test (Fatal) at the deadline.
func Wait(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	if err := Until(timeout, what, cond); err != nil {
		t.Fatal(err)
	}
}

// WaitTrue is Wait for a condition with nothing to show but itself.
func WaitTrue(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	Wait(t, timeout, what, func() (bool, string) { return cond(), "" })
}
