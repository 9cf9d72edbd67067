//go:build !amd64

package tsc

const have = false

// Read returns 0 where there is no time stamp counter.
func Read() uint64 { return 0 }
