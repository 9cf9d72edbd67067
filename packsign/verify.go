package packsign

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/hiddeco/sshsig"
	"golang.org/x/crypto/ssh"
)

// Why a signature is refused. Verify returns a *Refusal, which says the
// details and matches one of these with errors.Is.
var (
	ErrUnsigned      = errors.New("unsigned")
	ErrMalformed     = errors.New("not an SSH signature")
	ErrNamespace     = errors.New("signed for another use")
	ErrTampered      = errors.New("the signature does not match the pack")
	ErrUnknownSigner = errors.New("unknown signer")
	ErrNotAllowed    = errors.New("the signer may not sign packs")
	ErrNotYetValid   = errors.New("the signer's key is not valid yet")
	ErrExpired       = errors.New("the signer's key has expired")
	ErrRevoked       = errors.New("the signer's key is revoked")
)

// Refusal is a signature Verify refuses: Reason is one of the Err values
// above, Detail says what was found.
type Refusal struct {
	Reason error
	Detail string
}

func (r *Refusal) Error() string { return r.Reason.Error() + ": " + r.Detail }

// Unwrap makes errors.Is(err, ErrExpired) and the like work.
func (r *Refusal) Unwrap() error { return r.Reason }

func refuse(reason error, format string, args ...any) error {
	return &Refusal{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// Policy is what a verifier trusts.
type Policy struct {
	Signers *AllowedSigners
	Revoked *RevokedKeys // nil: none
	Now     time.Time    // the zero time: time.Now()
}

// Signer is who signed a pack that Verify accepted.
type Signer struct {
	Principals []string // the allowed_signers line's principals (a certificate's principal for a CA line)
	Key        string   // KeyString of the signing key
	Line       int      // the allowed_signers line that allowed it
}

func (s *Signer) String() string {
	return fmt.Sprintf("%s (%s)", strings.Join(s.Principals, ","), s.Key)
}

// Verify checks the armored SSHSIG signature sig over data, in this
// order: there is one; it parses; its namespace is Namespace; it matches
// data (the key in it signed exactly these bytes); its key is not
// revoked; the allowed signers have the key (or, for a certificate, its CA
// with cert-authority and one of its principals), for namespace gprobes,
// valid now. Each refusal is a *Refusal whose Reason is the first check
// that failed.
func Verify(data, sig []byte, p Policy) (*Signer, error) {
	if len(bytes.TrimSpace(sig)) == 0 {
		return nil, refuse(ErrUnsigned, "the pack has no signature")
	}
	s, err := sshsig.Unarmor(sig)
	if err != nil {
		return nil, refuse(ErrMalformed, "%v", err)
	}
	if s.Namespace != Namespace {
		return nil, refuse(ErrNamespace, "signed for namespace %q, not %q: the key signed something else (a commit, a file), not this probe pack", s.Namespace, Namespace)
	}
	if err := sshsig.Verify(bytes.NewReader(data), s, s.PublicKey, s.HashAlgorithm, Namespace); err != nil {
		return nil, refuse(ErrTampered, "the signature by %s is not over these bytes: the pack was changed after it was signed, or the signature is another file's (%v)", KeyString(s.PublicKey), err)
	}
	now := p.Now
	if now.IsZero() {
		now = time.Now()
	}
	key := s.PublicKey
	cert, isCert := key.(*ssh.Certificate)
	if p.Revoked.has(key) || isCert && (p.Revoked.has(cert.Key) || p.Revoked.has(cert.SignatureKey)) {
		return nil, refuse(ErrRevoked, "%s is listed in %s", KeyString(key), p.Revoked.path)
	}
	if p.Signers == nil {
		return nil, refuse(ErrUnknownSigner, "no allowed signers given")
	}
	var matched []signerEntry
	for _, e := range p.Signers.entries {
		switch {
		case !isCert && !e.ca && bytes.Equal(e.key.Marshal(), key.Marshal()):
			matched = append(matched, e)
		case isCert && e.ca && bytes.Equal(e.key.Marshal(), cert.SignatureKey.Marshal()):
			matched = append(matched, e)
		}
	}
	if len(matched) == 0 {
		how := "is not"
		if isCert {
			how = "has a CA that is not, with cert-authority,"
		}
		return nil, refuse(ErrUnknownSigner, "%s %s in %s", KeyString(key), how, p.Signers.path)
	}
	var first error // the first line's reason, when none accepts
	keep := func(err error) {
		if first == nil {
			first = err
		}
	}
	for _, e := range matched {
		where := fmt.Sprintf("%s:%d", p.Signers.path, e.line)
		if e.namespaces != nil && !matchList(Namespace, e.namespaces) {
			keep(refuse(ErrNotAllowed, "%s allows %s for namespaces %q only, not %q", where, KeyString(key), strings.Join(e.namespaces, ","), Namespace))
			continue
		}
		if !e.validAfter.IsZero() && now.Before(e.validAfter) {
			keep(refuse(ErrNotYetValid, "%s allows %s from %s (valid-after), it is %s", where, KeyString(key), e.validAfter.Format(time.RFC3339), now.Format(time.RFC3339)))
			continue
		}
		if !e.validBefore.IsZero() && now.After(e.validBefore) {
			keep(refuse(ErrExpired, "%s allowed %s until %s (valid-before), it is %s", where, KeyString(key), e.validBefore.Format(time.RFC3339), now.Format(time.RFC3339)))
			continue
		}
		principals := e.principals
		if isCert {
			ok, principal := certOK(cert, e, now, where, keep)
			if !ok {
				continue
			}
			principals = []string{principal}
		}
		return &Signer{Principals: principals, Key: KeyString(key), Line: e.line}, nil
	}
	return nil, first
}

// certOK checks a user certificate against a cert-authority line: a user
// certificate, valid now, with a principal the line's patterns match.
func certOK(cert *ssh.Certificate, e signerEntry, now time.Time, where string, keep func(error)) (bool, string) {
	if cert.CertType != ssh.UserCert {
		keep(refuse(ErrNotAllowed, "%s: %s is a host certificate, not a user certificate", where, KeyString(cert)))
		return false, ""
	}
	unix := uint64(now.Unix())
	if unix < cert.ValidAfter {
		keep(refuse(ErrNotYetValid, "%s is valid from %s", KeyString(cert), time.Unix(int64(cert.ValidAfter), 0).UTC().Format(time.RFC3339)))
		return false, ""
	}
	if cert.ValidBefore != ssh.CertTimeInfinity && unix >= cert.ValidBefore {
		keep(refuse(ErrExpired, "%s expired at %s", KeyString(cert), time.Unix(int64(cert.ValidBefore), 0).UTC().Format(time.RFC3339)))
		return false, ""
	}
	for _, pr := range cert.ValidPrincipals {
		if matchList(pr, e.principals) {
			return true, pr
		}
	}
	keep(refuse(ErrUnknownSigner, "%s: no principal of %s (%s) matches %s", where, KeyString(cert), strings.Join(cert.ValidPrincipals, ","), strings.Join(e.principals, ",")))
	return false, ""
}

// ReadSignature reads the signature of the pack at packPath: sigPath, or
// packPath+SigSuffix when sigPath is "". A missing file is no signature
// (nil, nil) when sigPath was not given; a file given and missing is an
// error.
func ReadSignature(packPath, sigPath string) ([]byte, error) {
	p := sigPath
	if p == "" {
		p = packPath + SigSuffix
	}
	b, err := os.ReadFile(p)
	if err != nil {
		if sigPath == "" && errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("signature: %w", err)
	}
	return b, nil
}
