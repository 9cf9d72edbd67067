package testkit

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// lockLab takes the flock on path, or returns nil when an ancestor of this
// process holds it.
func lockLab(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o666)
	if err != nil {
		return nil, err
	}
	err = flock(f, syscall.LOCK_EX|syscall.LOCK_NB)
	if err == nil {
		return f, nil
	}
	if !errors.Is(err, syscall.EWOULDBLOCK) {
		f.Close()
		return nil, err
	}
	holders := lockHolders(f)
	for _, pid := range holders {
		if isAncestor(pid) {
			f.Close()
			return nil, nil
		}
	}
	who := "another process"
	if len(holders) > 0 {
		who = fmt.Sprintf("pid %d (%s)", holders[0], cmdline(holders[0]))
	}
	fmt.Fprintf(os.Stderr, "testkit: waiting for the lab lock %s, held by %s\n", path, who)
	labLock.waiting.Add(1)
	err = flock(f, syscall.LOCK_EX)
	labLock.waiting.Add(-1)
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func flock(f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if err != syscall.EINTR {
			return err
		}
	}
}

// lockHolders are the pids /proc/locks gives for the flocks on f's file
// ("1: FLOCK  ADVISORY  WRITE PID MAJ:MIN:INODE 0 EOF", the device in hex).
func lockHolders(f *os.File) []int {
	var st syscall.Stat_t
	if syscall.Fstat(int(f.Fd()), &st) != nil {
		return nil
	}
	major := (st.Dev>>8)&0xfff | (st.Dev>>32)&^0xfff
	minor := st.Dev&0xff | (st.Dev>>12)&^0xff
	want := fmt.Sprintf("%02x:%02x:%d", major, minor, st.Ino)
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		return nil
	}
	var pids []int
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 6 || f[1] != "FLOCK" || f[5] != want {
			continue
		}
		if pid, err := strconv.Atoi(f[4]); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids
}

// isAncestor reports whether pid is this process's parent, its parent's
// parent, and so on.
func isAncestor(pid int) bool {
	for p := os.Getppid(); p > 1; {
		if p == pid {
			return true
		}
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/stat")
		if err != nil {
			return false
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			return false
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			return false
		}
		if p, err = strconv.Atoi(f[1]); err != nil {
			return false
		}
	}
	return false
}

func cmdline(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || len(b) == 0 {
		return "gone"
	}
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}
