// Package metrics serves a gprobes daemon's counts as Prometheus metrics,
// with prometheus/client_golang: gprobes daemon --metrics ADDR, and GET
// /metrics on the daemon's socket (docs/api.md, "Prometheus metrics").
//
// Nothing is counted for Prometheus on a probe hit: the Collector reads
// at scrape time what the daemon already keeps for query and status (each
// target's probes, the log's counts, the exporters'), as a custom
// prometheus.Collector whose metrics are made afresh at each scrape.
//
// The trap: a scrape asks every target's engine for its probes, which it
// answers between hits on its loop; a target whose loop is stuck (a GDB
// stub that does not answer) holds that scrape up as it holds up query.
package metrics
