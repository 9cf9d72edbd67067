// Package otlptest runs the OpenTelemetry Collector's own OTLP receiver
// (go.opentelemetry.io/collector/receiver/otlpreceiver, gRPC and HTTP)
// in-process, with the collector's consumertest sink behind it: what the
// tests of package otlp and of gprobes daemon --otlp send their records
// to, and scripts/bench-process's receiver. It is the collector's code,
// not a mock of the protocol: a record it holds went through the
// collector's decoding as it would in production.
//
// The trap: the receiver cannot listen on port 0 and say which port it
// got, so Start picks free ports first (FreeAddr); another process could
// take one in between, and Start then fails.
package otlptest

import (
	"context"
	"fmt"
	"net"
	"sync"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configgrpc"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/receiver/receivertest"
)

// Receiver is a running OTLP receiver.
type Receiver struct {
	// GRPC and HTTP are host:port of its two listeners ("" when not
	// started).
	GRPC, HTTP string
	sink       *consumertest.LogsSink
	rcv        receiver.Logs
	mu         sync.Mutex
	closed     bool
}

// FreeAddr is a free TCP address on the loopback interface, host:port.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// Start runs the receiver with gRPC on grpcAddr and HTTP on httpAddr
// (host:port; "" leaves that protocol off; "auto" picks a free port).
func Start(grpcAddr, httpAddr string) (*Receiver, error) {
	r := &Receiver{sink: new(consumertest.LogsSink)}
	return r, r.start(grpcAddr, httpAddr, r.sink)
}

// StartConsumer is Start with another consumer behind the receiver (the
// benchmark's counting one); Records and the like then see nothing.
func StartConsumer(grpcAddr, httpAddr string, next consumer.Logs) (*Receiver, error) {
	r := &Receiver{sink: new(consumertest.LogsSink)}
	return r, r.start(grpcAddr, httpAddr, next)
}

func (r *Receiver) start(grpcAddr, httpAddr string, next consumer.Logs) error {
	var err error
	if grpcAddr == "auto" {
		if grpcAddr, err = FreeAddr(); err != nil {
			return err
		}
	}
	if httpAddr == "auto" {
		if httpAddr, err = FreeAddr(); err != nil {
			return err
		}
	}
	f := otlpreceiver.NewFactory()
	cfg := f.CreateDefaultConfig().(*otlpreceiver.Config)
	if grpcAddr != "" {
		cfg.Protocols.GRPC.GetOrInsertDefault().NetAddr.Endpoint = grpcAddr
	} else {
		cfg.Protocols.GRPC = configoptional.None[configgrpc.ServerConfig]()
	}
	if httpAddr != "" {
		cfg.Protocols.HTTP.GetOrInsertDefault().ServerConfig.NetAddr.Endpoint = httpAddr
	} else {
		cfg.Protocols.HTTP = configoptional.None[otlpreceiver.HTTPConfig]()
	}
	set := receivertest.NewNopSettings(f.Type())
	set.ID = component.NewIDWithName(f.Type(), fmt.Sprintf("gprobes-%s-%s", grpcAddr, httpAddr))
	rcv, err := f.CreateLogs(context.Background(), set, cfg, next)
	if err != nil {
		return fmt.Errorf("otlp receiver: %w", err)
	}
	if err := rcv.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		return fmt.Errorf("otlp receiver on grpc %q, http %q: %w", grpcAddr, httpAddr, err)
	}
	r.GRPC, r.HTTP, r.rcv = grpcAddr, httpAddr, rcv
	return nil
}

// Close stops the receiver.
func (r *Receiver) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.rcv == nil {
		return nil
	}
	r.closed = true
	return r.rcv.Shutdown(context.Background())
}

// Count is how many log records arrived.
func (r *Receiver) Count() int { return r.sink.LogRecordCount() }

// Record is one log record as it arrived, with its resource's and its
// own attributes as Go values (AsRaw: strings, int64, []byte...).
type Record struct {
	Resource     map[string]any
	Scope        string
	Attrs        map[string]any
	Body         string
	Severity     plog.SeverityNumber
	SeverityText string
	Time         int64 // Unix nanoseconds
	Observed     int64
}

// Records are the records that arrived, in order.
func (r *Receiver) Records() []Record {
	var out []Record
	for _, ld := range r.sink.AllLogs() {
		rls := ld.ResourceLogs()
		for i := 0; i < rls.Len(); i++ {
			rl := rls.At(i)
			res := rl.Resource().Attributes().AsRaw()
			sls := rl.ScopeLogs()
			for j := 0; j < sls.Len(); j++ {
				sl := sls.At(j)
				lrs := sl.LogRecords()
				for k := 0; k < lrs.Len(); k++ {
					lr := lrs.At(k)
					out = append(out, Record{Resource: res, Scope: sl.Scope().Name(), Attrs: lr.Attributes().AsRaw(),
						Body: lr.Body().AsString(), Severity: lr.SeverityNumber(), SeverityText: lr.SeverityText(),
						Time: int64(lr.Timestamp()), Observed: int64(lr.ObservedTimestamp())})
				}
			}
		}
	}
	return out
}
