//go:build !linux

package daemon

import (
	"errors"
	"sync/atomic"
)

// watchName: without inotify, writes compare the path with the file every
// checkInterval.
func watchName(path string, changed *atomic.Bool) (stop func(), err error) {
	return nil, errors.New("no inotify")
}
