//go:build race

package ptrace_test

// raceBuild: the race detector slows the engine several times over.
const raceBuild = true
