package packsign

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// AllowedSigners is an allowed_signers file (ssh-keygen(1), "ALLOWED
// SIGNERS"): one line a key,
//
//	principals [options] keytype base64-key [comment]
//
// principals a comma-separated list of patterns (* and ?), quoted when it
// holds spaces; options comma-separated: cert-authority (the key is a CA
// whose user certificates may sign, for a principal of theirs matching the
// patterns), namespaces="LIST" (the namespaces the key may sign for,
// patterns, ! negates), valid-after="TIME", valid-before="TIME" (TIME as
// YYYYMMDD[HHMM[SS]], UTC with a trailing Z, local time without). Empty
// lines and lines starting with # are ignored.
type AllowedSigners struct {
	path    string
	entries []signerEntry
}

type signerEntry struct {
	line        int
	principals  []string
	key         ssh.PublicKey
	ca          bool
	namespaces  []string // nil: any
	validAfter  time.Time
	validBefore time.Time
}

// ReadAllowedSigners reads an allowed_signers file.
func ReadAllowedSigners(file string) (*AllowedSigners, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("allowed signers: %w", err)
	}
	return ParseAllowedSigners(file, b)
}

// ParseAllowedSigners parses the text of an allowed_signers file; name is
// what messages call it. A line it cannot read is an error naming the
// line: a file that says less than its author meant must not be trusted
// as it is.
func ParseAllowedSigners(name string, data []byte) (*AllowedSigners, error) {
	a := &AllowedSigners{path: name}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		e, err := parseSignerLine(line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, i+1, err)
		}
		e.line = i + 1
		a.entries = append(a.entries, e)
	}
	return a, nil
}

// Path is the file's name, as given.
func (a *AllowedSigners) Path() string { return a.path }

func parseSignerLine(line string) (signerEntry, error) {
	var e signerEntry
	var principals, rest string
	if line[0] == '"' {
		end := strings.IndexByte(line[1:], '"')
		if end < 0 {
			return e, errors.New("the principals' quote is not closed")
		}
		principals, rest = line[1:1+end], line[2+end:]
	} else {
		n := strings.IndexAny(line, " \t")
		if n < 0 {
			return e, errors.New("principals without a key")
		}
		principals, rest = line[:n], line[n:]
	}
	for _, p := range strings.Split(principals, ",") {
		if p = strings.TrimSpace(p); p != "" {
			e.principals = append(e.principals, p)
		}
	}
	if len(e.principals) == 0 {
		return e, errors.New("no principal")
	}
	key, _, options, _, err := ssh.ParseAuthorizedKey([]byte(strings.TrimSpace(rest)))
	if err != nil {
		return e, fmt.Errorf("no public key after the principals: %w", err)
	}
	e.key = key
	for _, o := range options {
		name, value, hasValue := strings.Cut(o, "=")
		if hasValue {
			if len(value) < 2 || value[0] != '"' || value[len(value)-1] != '"' {
				return e, fmt.Errorf("option %s: the value must be quoted", name)
			}
			value = value[1 : len(value)-1]
		}
		switch strings.ToLower(name) {
		case "cert-authority":
			e.ca = true
		case "namespaces":
			e.namespaces = strings.Split(value, ",")
		case "valid-after":
			if e.validAfter, err = parseSignerTime(value); err != nil {
				return e, fmt.Errorf("valid-after: %w", err)
			}
		case "valid-before":
			if e.validBefore, err = parseSignerTime(value); err != nil {
				return e, fmt.Errorf("valid-before: %w", err)
			}
		default:
			return e, fmt.Errorf("unknown option %q", name)
		}
	}
	return e, nil
}

// parseSignerTime reads YYYYMMDD, YYYYMMDDHHMM or YYYYMMDDHHMMSS, UTC when
// followed by Z, local time otherwise (ssh-keygen's format).
func parseSignerTime(s string) (time.Time, error) {
	loc := time.Local
	if strings.HasSuffix(s, "Z") || strings.HasSuffix(s, "z") {
		s, loc = s[:len(s)-1], time.UTC
	}
	layout := map[int]string{8: "20060102", 12: "200601021504", 14: "20060102150405"}[len(s)]
	if layout == "" {
		return time.Time{}, fmt.Errorf("%q is not YYYYMMDD[HHMM[SS]][Z]", s)
	}
	t, err := time.ParseInLocation(layout, s, loc)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not YYYYMMDD[HHMM[SS]][Z]", s)
	}
	return t, nil
}

// matchList matches s against a comma-separated pattern list already
// split: true when a pattern matches and no negated one (!pattern) does,
// as OpenSSH's match_pattern_list.
func matchList(s string, patterns []string) bool {
	ok := false
	for _, p := range patterns {
		p = strings.TrimSpace(p)
		neg := strings.HasPrefix(p, "!")
		if neg {
			p = p[1:]
		}
		// path.Match's syntax is a superset of ssh's * and ?; a pattern
		// with [ is matched literally, as ssh does
		m := p == s
		if !strings.ContainsAny(p, "[\\") {
			m, _ = path.Match(p, s)
		}
		if m && neg {
			return false
		}
		ok = ok || m
	}
	return ok
}

// RevokedKeys are public keys no signature is accepted from, one a line as
// in authorized_keys (the plain list ssh-keygen -Y verify -r takes; a
// binary KRL is not read).
type RevokedKeys struct {
	path string
	keys [][]byte
}

// ReadRevokedKeys reads a revoked-keys file.
func ReadRevokedKeys(file string) (*RevokedKeys, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("revoked keys: %w", err)
	}
	if bytes.HasPrefix(b, []byte("SSHKRL\n\x00")) {
		return nil, fmt.Errorf("revoked keys: %s is a binary KRL, which gprobes does not read: list the revoked public keys, one a line", file)
	}
	r := &RevokedKeys{path: file}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
		if err != nil {
			return nil, fmt.Errorf("revoked keys: %s:%d: %w", file, i+1, err)
		}
		r.keys = append(r.keys, k.Marshal())
	}
	return r, nil
}

func (r *RevokedKeys) has(k ssh.PublicKey) bool {
	if r == nil {
		return false
	}
	b := k.Marshal()
	for _, x := range r.keys {
		if bytes.Equal(x, b) {
			return true
		}
	}
	return false
}
