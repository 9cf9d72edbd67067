package symbols

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
)

// Short names: a user module named without a directory. "libc.so.6" and
// "hits" name a file by its base name; "libc" and "libssl" name a library
// as a C linker's -lc and -lssl do, and as bpftrace's uprobe:libc:malloc
// does: the file libc.so, or libc.so.VERSION (libc.so.6). In a process
// the file is the one it maps (MatchShortName); on the host it is found
// through the dynamic loader's cache, /etc/ld.so.cache, then the standard
// library directories, then PATH for a program (FindModuleFile).

// MatchShortName reports whether a file whose base name is base is what
// the module name name (no '/') stands for: exact when base is name
// itself, else when name is a library's short name and base is name.so or
// name.so.VERSION (or name is NAME.so and base NAME.so.VERSION).
func MatchShortName(base, name string) (ok, exact bool) {
	if base == name {
		return true, true
	}
	if name == "" || strings.Contains(name, "/") {
		return false, false
	}
	if strings.HasSuffix(name, ".so") { // libc.so: libc.so.6
		return strings.HasPrefix(base, name+"."), false
	}
	if strings.Contains(name, ".so") {
		return false, false
	}
	return base == name+".so" || strings.HasPrefix(base, name+".so."), false
}

// LDCachePath is the dynamic loader's cache of libraries.
const LDCachePath = "/etc/ld.so.cache"

// LDCacheEntry is one library of the loader's cache: its name (a file's
// base name, "libc.so.6") and path, for one ABI.
type LDCacheEntry struct {
	Name, Path string
	Flags      int32 // the kind and ABI: FLAG_ELF_LIBC6 | FLAG_X8664_LIB64 (0x0303) for x86-64
}

// ldCacheMagic starts glibc's cache format (glibc 2.32 and later write
// only this one; older ones write it after the old format's table).
const ldCacheMagic = "glibc-ld.so.cache1.1"

// ReadLDCache reads a dynamic loader's cache file (glibc's format, as
// ldconfig writes it) and returns its libraries in the file's order
// (ldconfig -p prints the same).
func ReadLDCache(path string) ([]LDCacheEntry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseLDCache(data)
}

// ParseLDCache is ReadLDCache for the file's bytes.
func ParseLDCache(data []byte) ([]LDCacheEntry, error) {
	start := bytes.Index(data, []byte(ldCacheMagic))
	if start < 0 {
		return nil, errors.New("ld.so.cache: no " + ldCacheMagic + " table (a cache in the old format only)")
	}
	const header, entry = 48, 24
	h := data[start:]
	if len(h) < header {
		return nil, errors.New("ld.so.cache: cut in its header")
	}
	le := binary.LittleEndian
	n := int(le.Uint32(h[20:]))
	if n < 0 || n > (len(h)-header)/entry {
		return nil, fmt.Errorf("ld.so.cache: %d libraries do not fit in %d bytes", n, len(h))
	}
	str := func(off uint32) (string, bool) {
		// offsets count from the new format's header
		o := int(off)
		if o < 0 || o >= len(h) {
			return "", false
		}
		end := bytes.IndexByte(h[o:], 0)
		if end < 0 {
			return "", false
		}
		return string(h[o : o+end]), true
	}
	out := make([]LDCacheEntry, 0, n)
	for i := 0; i < n; i++ {
		e := h[header+i*entry:]
		name, ok1 := str(le.Uint32(e[4:]))
		path, ok2 := str(le.Uint32(e[8:]))
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("ld.so.cache: library %d's strings are outside the file", i)
		}
		out = append(out, LDCacheEntry{Name: name, Path: path, Flags: int32(le.Uint32(e))})
	}
	return out, nil
}

// hostABI is the cache's ABI flags of this machine's libraries (0 when
// gprobes does not know them: every entry then counts).
func hostABI() int32 {
	switch runtime.GOARCH {
	case "amd64":
		return 0x0303 // FLAG_ELF_LIBC6 | FLAG_X8664_LIB64
	case "arm64":
		return 0x0a03 // FLAG_ELF_LIBC6 | FLAG_AARCH64_LIB64
	}
	return 0
}

// LibraryDirs are the directories searched after the loader's cache, in
// order, as the loader's built-in list has them on Debian and Fedora.
var LibraryDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib", "/usr/local/lib"}

// FindModuleFile finds the file a user module's name stands for on this
// host, as bpftrace does for uprobe:NAME:...: a path is itself (made
// absolute); a name without '/' is looked for among the libraries of the
// loader's cache (ldCache: LDCachePath's, or another for tests; "" for
// none), then in LibraryDirs, then as a program in PATH. how says which:
// "ld.so.cache", "library directory", "PATH". A short name that matches
// several libraries prefers NAME.so (the file -lNAME links to, resolved),
// and is ambiguous otherwise: the error lists them.
func FindModuleFile(name, ldCache string) (path, how string, err error) {
	if name == "" {
		return "", "", errors.New("no module name")
	}
	if strings.Contains(name, "/") {
		abs, err := filepath.Abs(name)
		if err != nil {
			return "", "", err
		}
		if _, err := os.Stat(abs); err != nil {
			return "", "", err
		}
		return abs, "path", nil
	}
	var cands []string // paths, exact matches first
	seen := map[string]bool{}
	add := func(p string, exact bool) {
		if seen[p] {
			return
		}
		seen[p] = true
		if !isELF(p) { // a linker script (libc.so is one), or gone
			return
		}
		if exact {
			cands = append([]string{p}, cands...)
		} else {
			cands = append(cands, p)
		}
	}
	pick := func(how string) (string, string, error) {
		if len(cands) == 0 {
			return "", "", nil
		}
		if ok, exact := MatchShortName(filepath.Base(cands[0]), name); ok && exact {
			return cands[0], how, nil
		}
		// NAME.so, the development link to the default version
		for _, c := range cands {
			if filepath.Base(c) == name+".so" {
				if real, err := filepath.EvalSymlinks(c); err == nil {
					return real, how, nil
				}
			}
		}
		// one library under several names (libfoo.so.1 -> libfoo.so.1.2)
		reals := map[string]bool{}
		for _, c := range cands {
			r, err := filepath.EvalSymlinks(c)
			if err != nil {
				r = c
			}
			reals[r] = true
		}
		if len(reals) == 1 {
			for r := range reals {
				return r, how, nil
			}
		}
		sort.Strings(cands)
		return "", "", fmt.Errorf("%s is more than one library here (%s): name the one meant (%s)", name, how, strings.Join(cands, ", "))
	}
	if ldCache != "" {
		if entries, err := ReadLDCache(ldCache); err == nil {
			abi := hostABI()
			for _, e := range entries {
				if abi != 0 && e.Flags != abi {
					continue
				}
				if ok, exact := MatchShortName(e.Name, name); ok {
					add(e.Path, exact)
				}
			}
			if p, how, err := pick("ld.so.cache"); p != "" || err != nil {
				return p, how, err
			}
		}
	}
	for _, dir := range LibraryDirs {
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if ok, exact := MatchShortName(e.Name(), name); ok && !e.IsDir() {
				add(filepath.Join(dir, e.Name()), exact)
			}
		}
		if p, how, err := pick("library directory"); p != "" || err != nil {
			return p, how, err
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			return abs, "PATH", nil
		}
	}
	return "", "", fmt.Errorf("no library %s (%s.so or %s.so.VERSION in %s or %s) and no program %s in PATH", name, name, name, LDCachePath, strings.Join(LibraryDirs, ", "), name)
}

// isELF reports whether the file at path (links followed) starts as an
// ELF file does.
func isELF(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var magic [4]byte
	_, err = f.Read(magic[:])
	return err == nil && string(magic[:]) == "\x7fELF"
}
