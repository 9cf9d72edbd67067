package tsc

const have = true

// Read returns the time stamp counter (rdtsc).
func Read() uint64
