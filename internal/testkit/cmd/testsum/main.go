// Command testsum reads `go test -json` on its standard input and reports
// the run: each package's tests run, skipped and failed, the output of
// every failure, every skip with its reason, and the total. Under CI=true
// (or -ci) a skip the allowlist (-allow FILE) does not name fails the
// run. See package internal/testkit/testsum.
//
//	go test -json ./... 2>&1 | go run ./internal/testkit/cmd/testsum -allow .ci/skips
package main

import (
	"os"

	"github.com/gprobes/gprobes/internal/testkit/testsum"
)

func main() {
	os.Exit(testsum.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
