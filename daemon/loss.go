package daemon

import (
	"fmt"
	"sync"
	"time"
)

// Losses counts the records that could not be written somewhere (the log
// file, syslog, the file of gprobes run -o), per probe, with the first and
// the last error. The zero value is ready to use; it is safe for
// concurrent use.
type Losses struct {
	mu      sync.Mutex
	total   uint64
	byProbe map[probeKey]uint64
	sum     LossSummary
}

type probeKey struct {
	target, module string
	minor          uint16
}

// Add counts one record of the probe (target, module, minor) as lost
// because of err.
func (l *Losses) Add(target, module string, minor uint16, err error) {
	now := time.Now()
	msg := "unknown error"
	if err != nil {
		msg = err.Error()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byProbe == nil {
		l.byProbe = map[probeKey]uint64{}
	}
	l.byProbe[probeKey{target, module, minor}]++
	l.total++
	l.sum.Records = l.total
	if l.sum.FirstError == "" {
		l.sum.FirstError, l.sum.FirstAt = msg, now
	}
	l.sum.LastError, l.sum.LastAt = msg, now
}

// Of is how many records of one probe were lost.
func (l *Losses) Of(target, module string, minor uint16) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byProbe[probeKey{target, module, minor}]
}

// Total is how many records were lost.
func (l *Losses) Total() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// Summary is the count with the first and the last error.
func (l *Losses) Summary() LossSummary {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sum
}

// LossSummary says how many records were lost, since when and why.
type LossSummary struct {
	Records    uint64    `json:"records"`
	FirstError string    `json:"first_error,omitempty"`
	FirstAt    time.Time `json:"first_at,omitzero"`
	LastError  string    `json:"last_error,omitempty"`
	LastAt     time.Time `json:"last_at,omitzero"`
}

// String says it for a person: "N records lost: first error ... at ...".
func (s LossSummary) String() string {
	if s.Records == 0 {
		return "no record lost"
	}
	out := fmt.Sprintf("%s lost: %s at %s", plural(s.Records, "record"), s.FirstError, s.FirstAt.Format(time.RFC3339))
	if s.LastError != "" && (s.LastError != s.FirstError || s.Records > 1) {
		out += fmt.Sprintf(", last error %s at %s", s.LastError, s.LastAt.Format(time.RFC3339))
	}
	return out
}

func plural(n uint64, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// LogStatus is what /v1/status says about the log: the records lost on
// the way to the file and to syslog, and the rotation settings.
type LogStatus struct {
	Lost          LossSummary `json:"lost"`           // records that are not in the log file
	SyslogLost    LossSummary `json:"syslog_lost"`    // records syslog did not get
	Written       uint64      `json:"written"`        // records written to the log file
	SyslogWritten uint64      `json:"syslog_written"` // records syslog took
	Rotations     uint64      `json:"rotations"`      // times the log file was rotated
	Replaced      uint64      `json:"replaced"`       // times the log file was renamed, removed or cut under the daemon (and a new one started)
	LogSize       int64       `json:"log_size"`       // bytes in the current log file
	LogMaxSize    int64       `json:"log_max_size"`
	LogKeep       int         `json:"log_keep"`
	RotateError   string      `json:"rotate_error,omitempty"` // why the last rotation failed, if it did
}

// LostLine is the line /v1/log sends, among the records, when records
// were lost: the daemon-wide counts since it started. Its kind is "lost".
type LostLine struct {
	Time       time.Time   `json:"time"`
	Kind       string      `json:"kind"` // "lost"
	Lost       LossSummary `json:"lost"`
	SyslogLost LossSummary `json:"syslog_lost"`
	// RotatedAway is how many rotated files this reader of the log
	// skipped: it fell more than --log-keep rotations behind and they were
	// deleted before it got to them (their records were written, not
	// lost, but this stream does not have them).
	RotatedAway uint64 `json:"rotated_away,omitempty"`
	// InTargets is how many records the targets themselves dropped: the
	// rings of jump pads that were full (engine.Engine.Lost), counted per
	// probe in query's LOST column
	InTargets uint64 `json:"in_targets,omitempty"`
	// RenamedAway, RemovedAway and CutAway are the records this reader
	// could not read because their log file was changed under the daemon
	// (logrotate, a person): renamed to a name the daemon does not read
	// (the records are in that file), removed (they are gone), or cut
	// shorter (logrotate's copytruncate: they are in its copy). They were
	// written, not lost.
	RenamedAway uint64 `json:"renamed_away,omitempty"`
	RemovedAway uint64 `json:"removed_away,omitempty"`
	CutAway     uint64 `json:"cut_away,omitempty"`
}
