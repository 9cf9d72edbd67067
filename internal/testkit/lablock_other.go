//go:build !linux

package testkit

import "os"

// lockLab takes no lock: the labs run on Linux only.
func lockLab(string) (*os.File, error) { return nil, nil }
