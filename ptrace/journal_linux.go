package ptrace

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"

	"github.com/gprobes/gprobes/internal/recovery"
)

// A tracer killed with SIGKILL (or dead of a crash) leaves its int3 bytes
// in the processes it traced: the kernel detaches them, and the next
// thread to reach one dies of SIGTRAP. So every traced process with
// breakpoints in has a journal, rewritten whenever a breakpoint goes in or
// out (never at a hit) and removed when the last one goes, naming the
// owner, the process and, for every int3, its original byte and the file
// mapped there, and the usdt semaphores it counted up (engine/usdt.go),
// counted down again. A daemon starting, `gprobes recover`, or the guard that a
// daemon and `gprobes run --target pid:N` leave behind them puts the bytes
// back through /proc/PID/mem.
//
// What recovery cannot mend: a thread that reached an int3 between the
// tracer's death and the bytes going back (it gets SIGTRAP, as under any
// debugger killed the same way), and a thread the tracer had stopped in
// the middle of a hit. docs/engine.md gives the figures.

// DefaultJournalDir holds root's journals unless GPROBES_PROC_JOURNAL
// names another folder. /run is cleared at boot, which ends every process.
const DefaultJournalDir = "/run/gprobes/proc"

// JournalDir is the folder of the process journals: GPROBES_PROC_JOURNAL,
// else root's DefaultJournalDir; another user (who may probe their own
// processes, docs/engine.md "Never harm the target": unprivileged use)
// cannot write /run, and keeps them in
// $XDG_RUNTIME_DIR/gprobes/proc (also cleared at boot), else in
// /tmp/gprobes-UID/proc. `gprobes recover` run by that user finds them.
func JournalDir() string {
	if d := os.Getenv("GPROBES_PROC_JOURNAL"); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return DefaultJournalDir
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "gprobes", "proc")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("gprobes-%d", os.Geteuid()), "proc")
}

// journal is what one tracer changed in one process.
type journal struct {
	Pid        int         `json:"pid"`         // the traced process
	Start      uint64      `json:"start"`       // its start time: a pid is used again
	Owner      int         `json:"owner"`       // the tracer's process
	OwnerStart uint64      `json:"owner_start"` // its start time
	Bytes      []savedByte `json:"bytes"`
	// Watch are the debug registers set in the process's threads
	// (watch probes): the recovery turns them off in every thread
	Watch []savedWatch `json:"watch,omitempty"`
	// Live is where the process maps the tracer's liveness page (jump
	// pads, live_linux.go): the recovery marks its word dead before
	// anything else, and gives back the signal masks recorded there
	Live uint64 `json:"live,omitempty"`
	// Semas are the usdt semaphores gprobes counted up (engine/usdt.go):
	// the recovery counts each down by Count where the same file is
	// still mapped
	Semas []savedSema `json:"semas,omitempty"`
}

type savedSema struct {
	Addr  uint64 `json:"addr"`
	Count int    `json:"count"`
	Dev   string `json:"dev"`
	Inode uint64 `json:"inode"`
}

type savedWatch struct {
	Slot int    `json:"slot"`
	Addr uint64 `json:"addr"`
	Len  int    `json:"len"`
	Mode string `json:"mode"`
}

type savedByte struct {
	Addr uint64 `json:"addr"`
	Orig byte   `json:"orig"`
	// Dev and Inode name the file mapped at Addr: after an exec the
	// address may hold another program's code, which is left alone
	Dev   string `json:"dev"`
	Inode uint64 `json:"inode"`
	// a jump pad's jump: Code was written over Was
	Code []byte `json:"code,omitempty"`
	Was  []byte `json:"was,omitempty"`
}

// procJournal is the live journal of one traced process.
type procJournal struct {
	j     journal
	bytes map[uint64]savedByte
	semas map[uint64]savedSema
	path  string
	err   error // the last write's failure, reported once
}

func journalPath(dir string, pid int) string {
	return filepath.Join(dir, "pid"+strconv.Itoa(pid)+".json")
}

// journalOf returns the journal of a traced process, starting it.
func (tg *Target) journalOf(pid int) *procJournal {
	if pj := tg.journals[pid]; pj != nil {
		return pj
	}
	start, _ := recovery.StartTime(pid)
	ownerStart, _ := recovery.StartTime(os.Getpid())
	pj := &procJournal{
		j:     journal{Pid: pid, Start: start, Owner: os.Getpid(), OwnerStart: ownerStart},
		bytes: map[uint64]savedByte{},
		semas: map[uint64]savedSema{},
		path:  journalPath(tg.journalDir, pid),
	}
	if tg.live != nil {
		pj.j.Live = tg.live.at[pid]
	}
	tg.journals[pid] = pj
	return pj
}

// journalAdd records an int3 about to be written at addr over orig.
func (tg *Target) journalAdd(pid int, addr uint64, orig byte) error {
	return tg.journalEntry(pid, savedByte{Addr: addr, Orig: orig})
}

// journalPatch records a jump about to be written at addr over was.
func (tg *Target) journalPatch(pid int, addr uint64, code, was []byte) error {
	return tg.journalEntry(pid, savedByte{Addr: addr, Orig: was[0], Code: append([]byte(nil), code...), Was: append([]byte(nil), was...)})
}

// journalEntry records sb, with the file mapped at its address.
func (tg *Target) journalEntry(pid int, sb savedByte) error {
	if tg.journalDir == "" {
		return nil
	}
	if maps, err := Maps(pid); err == nil {
		for _, m := range maps {
			if sb.Addr >= m.Start && sb.Addr < m.End {
				sb.Dev, sb.Inode = m.Dev, m.Inode
				break
			}
		}
	}
	pj := tg.journalOf(pid)
	pj.bytes[sb.Addr] = sb
	return pj.write()
}

// journalRemove records that the byte at addr is back.
func (tg *Target) journalRemove(pid int, addr uint64) error {
	pj := tg.journals[pid]
	if pj == nil {
		return nil
	}
	delete(pj.bytes, addr)
	if pj.empty() {
		tg.journalDrop(pid)
		return nil
	}
	return pj.write()
}

// journalWatches records the debug registers of a process as they are
// about to be (watch_linux.go): the journal stays while one is set.
func (tg *Target) journalWatches(pid int) error {
	if tg.journalDir == "" {
		return nil
	}
	var ws []savedWatch
	if pw := tg.watches[pid]; pw != nil {
		for i, w := range pw.slots {
			if w != nil {
				ws = append(ws, savedWatch{Slot: i, Addr: w.Addr, Len: w.Len, Mode: w.Mode.String()})
			}
		}
	}
	pj := tg.journals[pid]
	if pj == nil && len(ws) == 0 {
		return nil
	}
	if pj == nil {
		pj = tg.journalOf(pid)
	}
	pj.j.Watch = ws
	if pj.empty() {
		tg.journalDrop(pid)
		return nil
	}
	return pj.write()
}

// empty reports whether the journal holds nothing to put back.
func (pj *procJournal) empty() bool {
	return len(pj.bytes) == 0 && len(pj.j.Watch) == 0 && len(pj.semas) == 0
}

// JournalSemaphore is engine.SemaphoreJournaler: gprobes counted the usdt
// semaphore at addr in process pid up (delta 1) or is about to count it
// down (-1).
func (tg *Target) JournalSemaphore(pid int, addr uint64, delta int) error {
	if tg.journalDir == "" {
		return nil
	}
	pj := tg.journalOf(pid)
	ss, ok := pj.semas[addr]
	if !ok {
		ss.Addr = addr
		if maps, err := Maps(pid); err == nil {
			for _, m := range maps {
				if addr >= m.Start && addr < m.End {
					ss.Dev, ss.Inode = m.Dev, m.Inode
					break
				}
			}
		}
	}
	ss.Count += delta
	if ss.Count <= 0 {
		delete(pj.semas, addr)
	} else {
		pj.semas[addr] = ss
	}
	if pj.empty() {
		tg.journalDrop(pid)
		return nil
	}
	return pj.write()
}

// journalLive records where process pid maps the liveness page.
func (tg *Target) journalLive(pid int, at uint64) error {
	if tg.journalDir == "" {
		return nil
	}
	pj := tg.journalOf(pid)
	pj.j.Live = at
	return pj.write()
}

// journalDrop forgets a process's journal: its memory holds none of our
// bytes any more (they are all back, it exec'd, or it is gone).
func (tg *Target) journalDrop(pid int) {
	if pj := tg.journals[pid]; pj != nil {
		os.Remove(pj.path)
		delete(tg.journals, pid)
	}
}

// journalFork gives a forked child the journal of its parent: its memory
// is a copy, int3 bytes included.
func (tg *Target) journalFork(child, parent int) {
	pj := tg.journals[parent]
	if pj == nil || tg.journalDir == "" {
		return
	}
	c := tg.journalOf(child)
	for a, b := range pj.bytes {
		c.bytes[a] = b
	}
	for a, ss := range pj.semas {
		c.semas[a] = ss
	}
	if err := c.write(); err != nil {
		tg.warnf("%v", err)
	}
}

// write rewrites the journal file, atomically (a new file renamed over
// the old one).
func (pj *procJournal) write() error {
	pj.j.Bytes = pj.j.Bytes[:0]
	for _, b := range pj.bytes {
		pj.j.Bytes = append(pj.j.Bytes, b)
	}
	sort.Slice(pj.j.Bytes, func(i, k int) bool { return pj.j.Bytes[i].Addr < pj.j.Bytes[k].Addr })
	pj.j.Semas = pj.j.Semas[:0]
	for _, ss := range pj.semas {
		pj.j.Semas = append(pj.j.Semas, ss)
	}
	sort.Slice(pj.j.Semas, func(i, k int) bool { return pj.j.Semas[i].Addr < pj.j.Semas[k].Addr })
	if err := recovery.Write(pj.path, &pj.j); err != nil {
		return fmt.Errorf("journal of process %d (what `gprobes recover` would need if gprobes died): %w", pj.j.Pid, err)
	}
	return nil
}

// openJournals readies the target's journal folder. A journal that a
// dead gprobes left for pid (0: none to check) is acted on first: its
// bytes go back before anything reads the process's code (else its int3s
// would be taken for the program's own). A live owner's means another
// gprobes traces pid: that is said, by name.
func (tg *Target) openJournals(pid int) error {
	dir := JournalDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("journal folder: %w", err)
	}
	// a folder in /tmp could be another user's, or a link to one: the
	// journals say what to write into processes
	if st, err := os.Lstat(dir); err != nil || !st.IsDir() || st.Sys().(*syscall.Stat_t).Uid != uint32(os.Geteuid()) || st.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("journal folder %s: not a folder of this user's that only it can write (set GPROBES_PROC_JOURNAL)", dir)
	}
	tg.journalDir = dir
	if pid == 0 {
		return nil
	}
	path := journalPath(dir, pid)
	j, err := readJournal(path)
	if err != nil {
		return nil // none (an unreadable one is for recover to report)
	}
	if recovery.Running(j.Owner, j.OwnerStart) {
		if j.Owner == os.Getpid() {
			return nil
		}
		if recovery.Running(j.Pid, j.Start) {
			return fmt.Errorf("attach %d: gprobes (pid %d) probes it already: remove its probes, or stop that gprobes", pid, j.Owner)
		}
		return nil
	}
	msg, err := recoverProcess(j)
	if err != nil {
		return fmt.Errorf("attach %d: putting back what gprobes %d left when it died: %w", pid, j.Owner, err)
	}
	os.Remove(path)
	fmt.Fprintf(os.Stderr, "gprobes: pid:%d: %s\n", pid, msg)
	return nil
}

func readJournal(path string) (*journal, error) {
	var j journal
	return &j, recovery.Read(path, &j)
}

// Recover puts back every process left with int3 bytes by a gprobes that
// died (the journals of owners no longer running) and says what it did,
// one line a process. Journals of running owners are left alone.
func Recover() ([]string, error) {
	return RecoverDir(JournalDir(), 0)
}

// RecoverOwner puts back the processes of one owner that is dying: its
// guard saw it go (docs/engine.md). The bytes go back while the kernel
// may still be tearing the owner down: the sooner, the fewer threads meet
// an int3 with nobody to answer it.
func RecoverOwner(owner int) ([]string, error) {
	return RecoverDir(JournalDir(), owner)
}

// RecoverDir is Recover for one journal folder; owner, when not 0, limits
// it to the journals of that owner, taken as dead whether or not its
// process is gone yet.
func RecoverDir(dir string, owner int) ([]string, error) {
	paths, _ := filepath.Glob(filepath.Join(dir, "pid*.json"))
	var out []string
	var errs []error
	for _, p := range paths {
		j, err := readJournal(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if owner != 0 && j.Owner != owner {
			continue
		}
		if owner == 0 && recovery.Running(j.Owner, j.OwnerStart) {
			continue
		}
		msg, err := recoverProcess(j)
		if err != nil {
			errs = append(errs, fmt.Errorf("pid:%d (left by gprobes %d): %w", j.Pid, j.Owner, err))
			continue
		}
		os.Remove(p)
		out = append(out, fmt.Sprintf("pid:%d: %s", j.Pid, msg))
	}
	return out, errors.Join(errs...)
}

// sameFile reports whether the file journaled for b is still the one
// mapped at its address.
func sameFile(maps []Mapping, b savedByte) bool {
	for _, m := range maps {
		if b.Addr >= m.Start && b.Addr < m.End {
			return m.Dev == b.Dev && m.Inode == b.Inode
		}
	}
	return false
}

// recoverProcess writes back the original bytes a dead owner left in a
// process: only where the byte is still an int3 and the same file is
// mapped there.
func recoverProcess(j *journal) (string, error) {
	if !recovery.Running(j.Pid, j.Start) {
		return "the process is gone; nothing to put back", nil
	}
	maps, err := Maps(j.Pid)
	if err != nil {
		return "", err
	}
	var errs []error
	if j.Live != 0 {
		// first: the pads stop running probes and never stop for the
		// dead tracer (the kernel marked it as the tracer died; this is
		// in case it could not)
		if err := recoverLive(j.Pid, maps, j.Live); err != nil {
			errs = append(errs, fmt.Errorf("mark the liveness word: %w", err))
		}
	}
	mem, err := os.OpenFile(fmt.Sprintf("/proc/%d/mem", j.Pid), os.O_RDWR, 0)
	if err != nil {
		return "", err
	}
	defer mem.Close()
	restored, other, jumps := 0, 0, 0
	var pending []savedByte
	for _, b := range j.Bytes {
		if len(b.Code) > 0 {
			pending = append(pending, b)
			continue
		}
		if !sameFile(maps, b) {
			other++ // unmapped, or another file there now (exec, dlclose)
			continue
		}
		var cur [1]byte
		if _, err := mem.ReadAt(cur[:], int64(b.Addr)); err != nil {
			errs = append(errs, fmt.Errorf("%#x: %w", b.Addr, err))
			continue
		}
		if cur[0] != 0xcc || b.Orig == 0xcc {
			other++ // put back already
			continue
		}
		if _, err := mem.WriteAt([]byte{b.Orig}, int64(b.Addr)); err != nil {
			errs = append(errs, fmt.Errorf("%#x: %w", b.Addr, err))
			continue
		}
		restored++
	}
	masks := 0
	if len(pending) > 0 {
		n, m, err := restoreJumps(j.Pid, maps, pending, j.Live)
		jumps += n
		masks = m
		if err != nil {
			errs = append(errs, err)
		}
	}
	semas := 0
	for _, ss := range j.Semas {
		if !sameFile(maps, savedByte{Addr: ss.Addr, Dev: ss.Dev, Inode: ss.Inode}) {
			continue // unmapped, or another file there now
		}
		var b [2]byte
		if _, err := mem.ReadAt(b[:], int64(ss.Addr)); err != nil {
			errs = append(errs, fmt.Errorf("usdt semaphore %#x: %w", ss.Addr, err))
			continue
		}
		v := int(binary.LittleEndian.Uint16(b[:])) - ss.Count
		binary.LittleEndian.PutUint16(b[:], uint16(max(v, 0)))
		if _, err := mem.WriteAt(b[:], int64(ss.Addr)); err != nil {
			errs = append(errs, fmt.Errorf("usdt semaphore %#x: %w", ss.Addr, err))
			continue
		}
		semas++
	}
	cleared := 0
	if len(j.Watch) > 0 {
		n, err := recoverWatches(j.Pid)
		cleared = n
		if err != nil {
			errs = append(errs, err)
		}
	}
	msg := fmt.Sprintf("put back after gprobes %d died with probes in: %d of %d int3 bytes restored", j.Owner, restored, len(j.Bytes)-len(pending))
	if len(pending) > 0 {
		msg += fmt.Sprintf(", %d of %d jumps to pads", jumps, len(pending))
	}
	if len(j.Watch) > 0 {
		msg += fmt.Sprintf(", %d watch debug registers turned off in %d threads", len(j.Watch), cleared)
	}
	if len(j.Semas) > 0 {
		msg += fmt.Sprintf(", %d of %d usdt semaphores counted down", semas, len(j.Semas))
	}
	if masks > 0 {
		msg += fmt.Sprintf(", the signal masks of %d threads holding signals inside pads given back", masks)
	}
	if other > 0 {
		msg += fmt.Sprintf(" (%d restored already or no longer that file's code)", other)
	}
	return msg, errors.Join(errs...)
}
