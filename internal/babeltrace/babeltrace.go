// Package babeltrace reads CTF traces back with babeltrace2, the reference
// CTF reader (not our own code), for the tests of gprobes' CTF writer: it
// runs babeltrace2 on a trace and parses its text output into events,
// and its warnings into the discarded-event counts it reports.
//
// The trap: the output parsed is that of babeltrace2's sink.text.pretty
// with --clock-cycles --no-delta --names=all, one event a line; another
// version could print differently, which the tests then report as a parse
// error naming the line.
package babeltrace

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/gprobes/gprobes/internal/testkit"
)

var installOnce sync.Once

// Need returns the path of babeltrace2. As root with CI=true or
// GPROBES_LAB_INSTALL=1 it installs the Debian package first if it is
// missing; without it the test skips (fails under CI=true).
func Need(t testing.TB) string {
	t.Helper()
	installOnce.Do(func() {
		if os.Geteuid() != 0 || (os.Getenv("CI") != "true" && os.Getenv("GPROBES_LAB_INSTALL") != "1") {
			return
		}
		if _, err := exec.LookPath("babeltrace2"); err == nil {
			return
		}
		out, err := exec.Command("apt-get", "install", "-y", "--no-install-recommends", "babeltrace2").CombinedOutput()
		if err != nil {
			t.Logf("apt-get install babeltrace2: %v\n%s", err, out)
		}
	})
	return testkit.Tool(t, "babeltrace2")
}

// Event is one event as babeltrace2 prints it.
type Event struct {
	Timestamp uint64 // the clock's value: nanoseconds since the Unix epoch
	Name      string
	Packet    map[string]any // the packet context's fields babeltrace2 shows (not its own)
	Context   map[string]any // the stream event context
	Fields    map[string]any // the payload
}

// Bare is a value babeltrace2 prints without quotes: an integer, in
// decimal or 0x hex.
type Bare string

// Uint is the value as an unsigned integer (decimal or 0x hex).
func (b Bare) Uint() (uint64, error) {
	s := string(b)
	if h, ok := strings.CutPrefix(s, "0x"); ok {
		return strconv.ParseUint(h, 16, 64)
	}
	return strconv.ParseUint(s, 10, 64)
}

// Int is the value as a signed decimal integer.
func (b Bare) Int() (int64, error) { return strconv.ParseInt(string(b), 10, 64) }

// Discarded is one "Tracer discarded N events" warning.
type Discarded struct {
	Count  uint64
	Stream string
}

var discardedRE = regexp.MustCompile(`Tracer discarded (\d+) events between .* within stream "([^"]*)"`)

// Read runs babeltrace2 on the trace directory and returns its events, in
// its order (time, then stream), and the discarded-event reports; a trace
// babeltrace2 cannot read fails the test.
func Read(t testing.TB, dir string) ([]Event, []Discarded) {
	t.Helper()
	events, disc, err := Try(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	return events, disc
}

// Try is Read returning babeltrace2's failure instead of failing the test
// (to wait for a trace that is still being written).
func Try(t testing.TB, dir string) ([]Event, []Discarded, error) {
	t.Helper()
	bt := Need(t)
	cmd := exec.Command(bt, "--clock-cycles", "--no-delta", "--names=all", dir)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, nil, fmt.Errorf("babeltrace2 %s: %v\n%s", dir, err, errb.String())
	}
	var events []Event
	for _, line := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		if line == "" {
			continue
		}
		ev, err := ParseLine(line)
		if err != nil {
			return nil, nil, fmt.Errorf("babeltrace2's line %q: %v", line, err)
		}
		events = append(events, ev)
	}
	var disc []Discarded
	for _, m := range discardedRE.FindAllStringSubmatch(errb.String(), -1) {
		n, _ := strconv.ParseUint(m[1], 10, 64)
		disc = append(disc, Discarded{n, m[2]})
	}
	return events, disc, nil
}

// ParseLine parses one event line of --names=all:
// "timestamp = N, trace:hostname = H, name = E, stream.packet.context = { ... },
// stream.event.context = { ... }, event.fields = { ... }".
func ParseLine(line string) (Event, error) {
	p := &parser{s: line}
	top, err := p.members(true)
	if err != nil {
		return Event{}, err
	}
	var ev Event
	ts, ok := top["timestamp"].(Bare)
	if !ok {
		return ev, fmt.Errorf("no timestamp")
	}
	if ev.Timestamp, err = ts.Uint(); err != nil {
		return ev, fmt.Errorf("timestamp: %v", err)
	}
	name, ok := top["name"].(Bare)
	if !ok {
		return ev, fmt.Errorf("no name")
	}
	ev.Name = string(name)
	ev.Packet, _ = top["stream.packet.context"].(map[string]any)
	ev.Context, _ = top["stream.event.context"].(map[string]any)
	ev.Fields, _ = top["event.fields"].(map[string]any)
	return ev, nil
}

type parser struct {
	s   string
	pos int
}

func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("at %d: %s", p.pos, fmt.Sprintf(format, args...))
}

func (p *parser) skipSpace() {
	for p.pos < len(p.s) && p.s[p.pos] == ' ' {
		p.pos++
	}
}

func (p *parser) peek(tok string) bool {
	p.skipSpace()
	return strings.HasPrefix(p.s[p.pos:], tok)
}

func (p *parser) expect(tok string) error {
	if !p.peek(tok) {
		return p.errorf("want %q", tok)
	}
	p.pos += len(tok)
	return nil
}

// members parses "name = value, ..." up to "}" (or the end, at the top).
func (p *parser) members(top bool) (map[string]any, error) {
	m := map[string]any{}
	for {
		p.skipSpace()
		if top && p.pos == len(p.s) || !top && p.peek("}") {
			return m, nil
		}
		i := strings.Index(p.s[p.pos:], " = ")
		if i < 0 {
			return nil, p.errorf("want NAME = VALUE")
		}
		name := p.s[p.pos : p.pos+i]
		p.pos += i + 3
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		m[name] = v
		p.skipSpace()
		if p.peek(",") {
			p.pos++
			if top && p.peek(",") { // babeltrace2 prints ", ," when a field is empty
				p.pos++
			}
		}
	}
}

func (p *parser) value() (any, error) {
	p.skipSpace()
	if p.pos >= len(p.s) {
		return nil, p.errorf("want a value")
	}
	switch p.s[p.pos] {
	case '{':
		p.pos++
		m, err := p.members(false)
		if err != nil {
			return nil, err
		}
		return m, p.expect("}")
	case '[':
		p.pos++
		var items []any
		for !p.peek("]") {
			if err := p.expect("["); err != nil {
				return nil, err
			}
			j := strings.Index(p.s[p.pos:], "] = ")
			if j < 0 {
				return nil, p.errorf("want [I] = VALUE")
			}
			idx, err := strconv.Atoi(p.s[p.pos : p.pos+j])
			if err != nil || idx != len(items) {
				return nil, p.errorf("index %q, want %d", p.s[p.pos:p.pos+j], len(items))
			}
			p.pos += j + 4
			v, err := p.value()
			if err != nil {
				return nil, err
			}
			items = append(items, v)
			if p.peek(",") {
				p.pos++
			}
		}
		p.pos++
		return items, nil
	case '"':
		p.pos++
		var sb strings.Builder
		for p.pos < len(p.s) {
			c := p.s[p.pos]
			p.pos++
			switch c {
			case '"':
				return sb.String(), nil
			case '\\':
				if p.pos >= len(p.s) {
					return nil, p.errorf("a string ends in \\")
				}
				e := p.s[p.pos]
				p.pos++
				switch e {
				case 'n':
					sb.WriteByte('\n')
				case 't':
					sb.WriteByte('\t')
				case 'r':
					sb.WriteByte('\r')
				default:
					sb.WriteByte(e)
				}
			default:
				sb.WriteByte(c)
			}
		}
		return nil, p.errorf("an unterminated string")
	}
	start := p.pos
	for p.pos < len(p.s) && p.s[p.pos] != ',' && p.s[p.pos] != ' ' && p.s[p.pos] != '}' && p.s[p.pos] != ']' {
		p.pos++
	}
	if p.pos == start {
		return nil, p.errorf("want a value")
	}
	return Bare(p.s[start:p.pos]), nil
}
