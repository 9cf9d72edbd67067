//go:build !race

package ptrace_test

const raceBuild = false
