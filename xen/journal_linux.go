package xen

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/gprobes/gprobes/internal/recovery"
)

// A gprobes killed with SIGKILL (or dead of a crash) leaves its domain in
// debugging mode with its breakpoints in: the next hit pauses the domain,
// and nobody lets it go. So every probed domain has a journal, rewritten
// whenever a breakpoint goes in or out (never at a hit) and removed at a
// clean detach, naming the owner and what it changed. The next gprobes to
// open that domain, or a daemon starting, or `gprobes recover`, puts the
// domain back: original bytes, debug registers cleared, vCPUs taken back
// to the instruction they stopped on, debugging mode off, unpaused.

// DefaultJournalDir holds the journals unless GPROBES_XEN_JOURNAL names
// another folder. /run is cleared at dom0's boot, which ends every domU.
const DefaultJournalDir = "/run/gprobes/xen"

func journalDir() string {
	if d := os.Getenv("GPROBES_XEN_JOURNAL"); d != "" {
		return d
	}
	return DefaultJournalDir
}

// journal is what a gprobes changed in one domain.
type journal struct {
	Dom    uint16 `json:"dom"`
	Handle string `json:"handle"` // the domain's UUID
	Pid    int    `json:"pid"`    // the owner
	Start  uint64 `json:"start"`  // its start time (clock ticks after boot): a pid is used again
	// the domain was paused already when gprobes took it
	PausedBefore bool        `json:"paused_before"`
	DR           [4]uint64   `json:"dr"`
	Bytes        []savedByte `json:"bytes"`
}

type savedByte struct {
	Addr uint64 `json:"addr"`
	Orig byte   `json:"orig"`
}

func journalPath(dir string, dom uint16) string {
	return filepath.Join(dir, "dom"+strconv.Itoa(int(dom))+".json")
}

// alive reports whether the journal's owner still runs.
func (j *journal) alive() bool {
	st, ok := recovery.StartTime(j.Pid)
	return ok && st == j.Start
}

// writeJournal records the target's changes (atomically: a new file
// renamed over the old one).
func (t *Target) writeJournal() error {
	if t.journal == nil {
		return nil
	}
	j := t.journal
	j.DR = t.journalDR() // code breakpoints and watches
	j.Bytes = j.Bytes[:0]
	for a := range t.bps {
		j.Bytes = append(j.Bytes, savedByte{Addr: a, Orig: t.orig[a]})
	}
	if err := recovery.Write(journalPath(t.journalDir, t.dom), j); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	return nil
}

// openJournal starts the target's journal, first recovering the domain
// from a dead owner's.
func (t *Target) openJournal(info DomainInfo) error {
	dir := journalDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	if old, err := readJournal(journalPath(dir, t.dom)); err == nil {
		if old.alive() {
			return fmt.Errorf("gprobes %d probes this domain already", old.Pid)
		}
		msg, err := recoverDomain(t.hv, old)
		if err != nil {
			return fmt.Errorf("recovering it from gprobes %d, which died with probes in: %w", old.Pid, err)
		}
		fmt.Fprintf(os.Stderr, "gprobes: xen:%d: %s\n", t.dom, msg)
		os.Remove(journalPath(dir, t.dom))
	}
	start, _ := recovery.StartTime(os.Getpid())
	t.journalDir = dir
	t.journal = &journal{Dom: t.dom, Handle: hex.EncodeToString(info.Handle[:]), Pid: os.Getpid(), Start: start, PausedBefore: info.Paused()}
	return t.writeJournal()
}

// closeJournal removes it: the domain is whole again.
func (t *Target) closeJournal() {
	if t.journal != nil {
		os.Remove(journalPath(t.journalDir, t.dom))
		t.journal = nil
	}
}

func readJournal(path string) (*journal, error) {
	var j journal
	return &j, recovery.Read(path, &j)
}

// Recover puts back every domain left with breakpoints by a gprobes that
// died (the journals of owners no longer running) and says what it did,
// one line a domain. Journals of running owners are left alone.
func Recover() ([]string, error) { return recoverJournals(0) }

// RecoverOwner puts back the domains of one owner that is dying: its
// guard saw it go (cmd/gprobes guard.go), whether or not its process is
// reaped yet.
func RecoverOwner(owner int) ([]string, error) { return recoverJournals(owner) }

func recoverJournals(owner int) ([]string, error) {
	dir := journalDir()
	paths, _ := filepath.Glob(filepath.Join(dir, "dom*.json"))
	var out []string
	var errs []error
	var hv *Hypervisor
	for _, p := range paths {
		j, err := readJournal(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if owner != 0 && j.Pid != owner || owner == 0 && j.alive() {
			continue
		}
		if hv == nil {
			if hv, err = OpenHypervisor(); err != nil {
				return out, err
			}
			defer hv.Close()
		}
		msg, err := recoverDomain(hv, j)
		if err != nil {
			errs = append(errs, fmt.Errorf("xen:%d (left by gprobes %d): %w", j.Dom, j.Pid, err))
			continue
		}
		os.Remove(p)
		out = append(out, fmt.Sprintf("xen:%d: %s", j.Dom, msg))
	}
	return out, errors.Join(errs...)
}

// recoverDomain undoes what a dead gprobes left in a domain.
func recoverDomain(hv *Hypervisor, j *journal) (string, error) {
	info, err := hv.Info(j.Dom)
	if errors.Is(err, ErrNoDomain) {
		return "the domain is gone; nothing to put back", nil
	}
	if err != nil {
		return "", err
	}
	if hex.EncodeToString(info.Handle[:]) != j.Handle {
		return "another domain has that id now; nothing to put back", nil
	}
	if info.Dying() {
		return "the domain is shutting down; nothing to put back", nil
	}
	t := newTarget(j.Dom, Options{Breakpoints: BreakAuto})
	t.hv = hv
	if t.width, err = addressSize(hv, j.Dom, info); err != nil {
		return "", err
	}
	t.sizeVCPUs(info.MaxVCPUID)
	t.dr = j.DR
	for _, b := range j.Bytes {
		t.bps[b.Addr] = true
	}
	defer func() {
		for _, m := range []map[uint64][]byte{t.frames, t.wframes} {
			for _, b := range m {
				UnmapFrame(b)
			}
		}
	}()
	// stop it, and find the vCPUs stopped on the dead owner's breakpoints
	if err := t.stopAll(); err != nil {
		return "", err
	}
	rewound := 0
	for _, ev := range t.queue {
		v := ev.Tid - 1
		if t.why[v] == stopByte {
			t.ctx[v].SetRIP(t.ctx[v].RIP() - 1)
			t.dirty[v] = true
			rewound++
		}
	}
	restored := 0
	var errs []error
	for _, b := range j.Bytes {
		var cur [1]byte
		if err := t.ReadMem(0, b.Addr, cur[:]); err != nil {
			errs = append(errs, fmt.Errorf("%#x: %w", b.Addr, err))
			continue
		}
		if cur[0] != opInt3 && cur[0] != opInt1 {
			continue // put back already, or the kernel changed it since
		}
		if err := t.WriteMem(0, b.Addr, []byte{b.Orig}); err != nil {
			errs = append(errs, fmt.Errorf("%#x: %w", b.Addr, err))
			continue
		}
		restored++
	}
	stepping := 0
	t.dr = [4]uint64{}
	for v := 0; v < t.vcpus; v++ {
		ctx, err := t.context(v)
		if err != nil {
			continue
		}
		if ctx.RFLAGS()&flagTF != 0 {
			// the owner died in the middle of a single-step
			ctx.SetRFLAGS(ctx.RFLAGS() &^ flagTF)
			t.dirty[v] = true
			stepping++
		}
		t.syncDR(v)
	}
	if err := t.commit(false); err != nil {
		errs = append(errs, err)
	}
	// every vCPU paused alone (the other vCPUs of a single-step), then
	// the domain: the owner's pauses, the traps' that nobody answered
	for v := 0; v < t.vcpus; v++ {
		for i := 0; i < 8 && hv.UnpauseVCPU(j.Dom, v) == nil; i++ {
		}
	}
	unpaused := 0
	for unpaused < 64 {
		info, err := hv.Info(j.Dom)
		if err != nil || !info.Paused() || hv.Unpause(j.Dom) != nil {
			break
		}
		unpaused++
	}
	if err := hv.SetDebugging(j.Dom, false); err != nil {
		errs = append(errs, err)
	}
	if j.PausedBefore {
		// Xen counts pauses but does not say whose: all were undone, and
		// the administrator's comes back
		if err := hv.Pause(j.Dom); err != nil {
			errs = append(errs, fmt.Errorf("the administrator's pause of domain %d back: %w", j.Dom, err))
		}
		unpaused--
	}
	// (one of the pauses undone was this function's own)
	msg := fmt.Sprintf("put back after gprobes %d died with probes in: %d of %d int3 bytes restored, %d debug registers cleared, %d vCPUs taken back to their probe, %d in a single-step, %d pauses left undone, debugging mode off",
		j.Pid, restored, len(j.Bytes), countDR(j.DR), rewound, stepping, unpaused-1)
	if j.PausedBefore {
		msg += " (it was paused before gprobes took it: left paused)"
	}
	return msg, errors.Join(errs...)
}

func countDR(dr [4]uint64) int {
	n := 0
	for _, a := range dr {
		if a != 0 {
			n++
		}
	}
	return n
}
