// Command otlpsink is scripts/bench-process's OTLP receiver: the
// OpenTelemetry Collector's own OTLP receiver (internal/otlptest) on a
// gRPC address, behind it a consumer that only counts the log records.
// GET /count on the -count address answers how many arrived. Its first
// line says both addresses ("auto" picks free ports).
//
//	otlpsink -grpc auto -count auto
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"

	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/gprobes/gprobes/internal/otlptest"
)

func main() {
	grpcAddr := flag.String("grpc", "auto", "the OTLP/gRPC `ADDR` to listen on (auto: a free port)")
	countAddr := flag.String("count", "auto", "serve GET /count on `ADDR` (auto: a free port)")
	flag.Parse()
	var n atomic.Int64
	count, err := consumer.NewLogs(func(_ context.Context, ld plog.Logs) error {
		n.Add(int64(ld.LogRecordCount()))
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	rcv, err := otlptest.StartConsumer(*grpcAddr, "", count)
	if err != nil {
		log.Fatal(err)
	}
	if *countAddr == "auto" {
		*countAddr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", *countAddr)
	if err != nil {
		log.Fatal(err)
	}
	http.HandleFunc("GET /count", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, n.Load()) })
	go func() { log.Fatal(http.Serve(ln, nil)) }()
	fmt.Printf("otlpsink: grpc %s count %s\n", rcv.GRPC, ln.Addr())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	<-sigs
	rcv.Close()
	fmt.Printf("otlpsink: %d records\n", n.Load())
}
