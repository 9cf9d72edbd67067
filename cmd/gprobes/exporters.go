package main

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gprobes/gprobes/daemon"
	"github.com/gprobes/gprobes/metrics"
	"github.com/gprobes/gprobes/otlp"
)

// exporterFlags are the daemon's flags for where else its records and
// counts go: OpenTelemetry (package otlp) and Prometheus (package metrics).
func exporterFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "otlp", Usage: "also export every committed record as an OpenTelemetry log to the OTLP receiver at `URL`: grpc://HOST:4317 (grpcs:// over TLS) or http://HOST:4318 (https://; the path defaults to /v1/logs); the OTEL_EXPORTER_OTLP_HEADERS and OTEL_RESOURCE_ATTRIBUTES variables apply"},
		&cli.StringFlag{Name: "otlp-queue", Value: "8MiB", Usage: "room for the records waiting for the OTLP forwarder, `SIZE` bytes (k, M, G for KiB, MiB, GiB; a record takes its JSON line as gprobes log --json prints it, some 300 bytes); a record that does not fit is dropped and counted, never waited for"},
		&cli.DurationFlag{Name: "otlp-retry", Value: otlp.DefaultRetry, Usage: "send a batch the OTLP receiver did not take (unreachable, busy) again for `DURATION`, with backoff, before its records are counted as dropped; 0 sends each batch once"},
		&cli.StringFlag{Name: "metrics", Usage: "serve Prometheus metrics at http://`ADDR`/metrics (HOST:PORT; 127.0.0.1:9464 keeps them on this machine); they are always at GET /metrics on the socket"},
	}
}

// startExporters adds the exporters the flags ask for to the daemon, and
// its metrics (on its socket, and at --metrics). Call it before Listen.
func startExporters(c *cli.Context, srv *daemon.Server) error {
	warn := func(msg string) { fmt.Fprintln(c.App.ErrWriter, "gprobes daemon:", msg) }
	var exps []daemon.Exporter
	if url := c.String("otlp"); url != "" {
		queue, err := parseSize(c.String("otlp-queue"))
		if err != nil || queue < 4096 || queue > 1<<30 {
			return cli.Exit(fmt.Sprintf("daemon: --otlp-queue %q: a size from 4KiB to 1GiB", c.String("otlp-queue")), 2)
		}
		retry := c.Duration("otlp-retry")
		switch {
		case retry < 0:
			return cli.Exit("daemon: --otlp-retry: a duration (30s, 2m), or 0", 2)
		case retry == 0:
			retry = -time.Nanosecond // otlp.Options: negative, no retry
		}
		e, err := otlp.New(otlp.Options{URL: url, Socket: socketOf(c), Queue: int(queue), Retry: retry, Warn: warn, Version: version})
		if err != nil {
			return cli.Exit("daemon: --otlp: "+err.Error(), 2)
		}
		srv.AddExporter(e)
		exps = append(exps, e)
	}
	if err := srv.ServeMetrics(metrics.Handler(metrics.New(srv, exps...)), c.String("metrics")); err != nil {
		return cli.Exit("daemon: --metrics: "+err.Error(), 1)
	}
	return nil
}

// otlpForwardCommand is the OTLP forwarder the daemon starts for --otlp
// (package otlp): hidden, not for people.
func otlpForwardCommand() *cli.Command {
	return &cli.Command{
		Name:      "otlp-forward",
		Hidden:    true,
		Usage:     "the daemon's OTLP forwarder: send the records of the ring on descriptor 3",
		ArgsUsage: "OPTIONS-JSON",
		Action: func(c *cli.Context) error {
			if err := otlp.Forward(c.Args().First()); err != nil {
				return cli.Exit("otlp-forward: "+err.Error(), 1)
			}
			return nil
		},
	}
}
