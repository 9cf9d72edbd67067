// Package testkit holds what the tests of every package share: the rule
// for something a test needs that this machine lacks (a tool, a kernel
// feature, a privilege), and C fixtures built once per test binary.
//
// The rule: on a developer's machine a test skips and says what is
// missing; under CI=true, where scripts/test installed everything, it
// fails, so that nothing is silently left untested. The trap: a test that
// calls testkit.CC must be in a package whose TestMain calls testkit.Main
// (or Cleanup), or the fixtures' temporary folder is left behind.
package testkit
