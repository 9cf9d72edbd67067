//go:build race

package main

// raceBuild: the race detector multiplies memory and time several times.
const raceBuild = true
