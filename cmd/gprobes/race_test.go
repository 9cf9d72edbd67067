//go:build race

package main

// raceBuild: the race detector slows gprobes several times over (the
// race phase of scripts/test runs every package so, -short).
const raceBuild = true
