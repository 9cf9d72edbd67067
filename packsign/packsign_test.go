package packsign

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gprobes/gprobes/internal/testkit"
)

const principal = "vendor@example.com"

// keygen makes an SSH key pair of type typ with ssh-keygen and returns the
// private key's path (the public key is PATH.pub).
func keygen(t *testing.T, dir, name, typ string) string {
	t.Helper()
	key := filepath.Join(dir, name)
	sshKeygen(t, "-q", "-t", typ, "-N", "", "-C", name, "-f", key)
	return key
}

func sshKeygen(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(testkit.Tool(t, "ssh-keygen"), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ssh-keygen %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// opensshVerify runs ssh-keygen -Y verify on the pack and its signature
// and returns whether it accepted them, and what it said.
func opensshVerify(t *testing.T, pack, sig, allowed, revoked string) (bool, string) {
	t.Helper()
	args := []string{"-Y", "verify", "-f", allowed, "-I", principal, "-n", Namespace, "-s", sig}
	if revoked != "" {
		args = append(args, "-r", revoked)
	}
	cmd := exec.Command(testkit.Tool(t, "ssh-keygen"), args...)
	in, err := os.Open(pack)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	cmd.Stdin = in
	out, err := cmd.CombinedOutput()
	return err == nil, string(out)
}

func pubLine(t *testing.T, key string) string {
	t.Helper()
	b, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func write(t *testing.T, path, text string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// pack is any bytes: a signature is over the file as it is.
var pack = []byte("\x89PPDF\r\n\x1a\n\x04\x00 a pack, as far as a signature cares\x00\xff")

// TestSignVerifiedByOpenSSH: a pack signed by gprobes verifies with
// ssh-keygen -Y verify, for each kind of key a vendor may have.
func TestSignVerifiedByOpenSSH(t *testing.T) {
	dir := t.TempDir()
	packPath := filepath.Join(dir, "p.ppdf")
	os.WriteFile(packPath, pack, 0o644)
	for _, typ := range []string{"ed25519", "rsa", "ecdsa"} {
		key := keygen(t, dir, "key-"+typ, typ)
		sig, err := Sign(pack, key)
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		write(t, packPath+SigSuffix, string(sig))
		allowed := write(t, filepath.Join(dir, "allowed"), principal+" "+pubLine(t, key)+"\n")
		if ok, out := opensshVerify(t, packPath, packPath+SigSuffix, allowed, ""); !ok || !strings.Contains(out, "Good") {
			t.Errorf("%s: ssh-keygen -Y verify refused gprobes' signature: %s", typ, out)
		}
		signers, err := ReadAllowedSigners(allowed)
		if err != nil {
			t.Fatal(err)
		}
		s, err := Verify(pack, sig, Policy{Signers: signers})
		if err != nil || s.Principals[0] != principal {
			t.Errorf("%s: Verify: %v %v", typ, s, err)
		}
	}
}

// TestOpenSSHSignatureAccepted: a signature made by ssh-keygen -Y sign over
// a pack is accepted, and says who signed.
func TestOpenSSHSignatureAccepted(t *testing.T) {
	dir := t.TempDir()
	packPath := filepath.Join(dir, "p.ppdf")
	os.WriteFile(packPath, pack, 0o644)
	for _, typ := range []string{"ed25519", "rsa", "ecdsa"} {
		key := keygen(t, dir, "key-"+typ, typ)
		os.Remove(packPath + SigSuffix)
		sshKeygen(t, "-Y", "sign", "-f", key, "-n", Namespace, packPath)
		sig, err := ReadSignature(packPath, "")
		if err != nil || sig == nil {
			t.Fatalf("%s: %v", typ, err)
		}
		signers, err := ParseAllowedSigners("allowed", []byte("# the vendor\n\n"+principal+",release@example.com "+pubLine(t, key)+"\n"))
		if err != nil {
			t.Fatal(err)
		}
		s, err := Verify(pack, sig, Policy{Signers: signers})
		if err != nil || strings.Join(s.Principals, ",") != principal+",release@example.com" || s.Line != 3 {
			t.Errorf("%s: Verify: %v %v", typ, s, err)
		}
	}
}

// TestRefusals: every refusal is named, and ssh-keygen -Y verify refuses
// the same packs (the differential check that gprobes trusts no more than
// OpenSSH would).
func TestRefusals(t *testing.T) {
	dir := t.TempDir()
	packPath := filepath.Join(dir, "p.ppdf")
	os.WriteFile(packPath, pack, 0o644)
	key := keygen(t, dir, "vendor", "ed25519")
	other := keygen(t, dir, "stranger", "ed25519")
	sig, err := Sign(pack, key)
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := Sign(pack, other)
	if err != nil {
		t.Fatal(err)
	}
	sshKeygen(t, "-Y", "sign", "-f", key, "-n", "git", packPath)
	gitSig, _ := os.ReadFile(packPath + SigSuffix)
	tampered := bytes.Clone(pack)
	tampered[len(tampered)-1] ^= 1
	line := principal + " " + pubLine(t, key)
	past := time.Now().Add(-48*time.Hour).UTC().Format("20060102") + "Z"
	future := time.Now().Add(48*time.Hour).UTC().Format("20060102") + "Z"
	revoked := write(t, filepath.Join(dir, "revoked"), pubLine(t, key)+"\n")
	for _, tc := range []struct {
		name    string
		data    []byte
		sig     []byte
		allowed string
		revoked string
		want    error
		detail  string
	}{
		{"unsigned", pack, nil, line, "", ErrUnsigned, "no signature"},
		{"garbage", pack, []byte("-----BEGIN SSH SIGNATURE-----\nAAAA\n-----END SSH SIGNATURE-----\n"), line, "", ErrMalformed, ""},
		{"namespace git", pack, gitSig, line, "", ErrNamespace, `namespace "git"`},
		{"tampered", tampered, sig, line, "", ErrTampered, "changed after it was signed"},
		{"unknown signer", pack, stranger, line, "", ErrUnknownSigner, "is not in allowed"},
		{"namespaces", pack, sig, principal + ` namespaces="git,file" ` + pubLine(t, key), "", ErrNotAllowed, `namespaces "git,file" only`},
		{"negated namespace", pack, sig, principal + ` namespaces="*,!gprobes" ` + pubLine(t, key), "", ErrNotAllowed, "only"},
		{"expired", pack, sig, principal + ` valid-before="` + past + `" ` + pubLine(t, key), "", ErrExpired, "valid-before"},
		{"not yet valid", pack, sig, principal + ` valid-after="` + future + `" ` + pubLine(t, key), "", ErrNotYetValid, "valid-after"},
		{"revoked", pack, sig, line, revoked, ErrRevoked, "listed in"},
		{"a CA line is not the key", pack, sig, principal + " cert-authority " + pubLine(t, key), "", ErrUnknownSigner, "is not in"},
	} {
		signers, err := ParseAllowedSigners("allowed_signers", []byte(tc.allowed+"\n"))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		pol := Policy{Signers: signers}
		if tc.revoked != "" {
			if pol.Revoked, err = ReadRevokedKeys(tc.revoked); err != nil {
				t.Fatal(err)
			}
		}
		s, err := Verify(tc.data, tc.sig, pol)
		var r *Refusal
		if s != nil || !errors.Is(err, tc.want) || !errors.As(err, &r) || !strings.Contains(err.Error(), tc.detail) {
			t.Errorf("%s: got %v, %v; want %v with %q", tc.name, s, err, tc.want, tc.detail)
			continue
		}
		if tc.sig == nil {
			continue
		}
		// OpenSSH refuses it too
		p := write(t, filepath.Join(dir, "q.ppdf"), string(tc.data))
		write(t, p+SigSuffix, string(tc.sig))
		allowed := write(t, filepath.Join(dir, "allowed"), tc.allowed+"\n")
		if ok, out := opensshVerify(t, p, p+SigSuffix, allowed, tc.revoked); ok {
			t.Errorf("%s: gprobes refuses, ssh-keygen -Y verify accepts: %s", tc.name, out)
		}
	}
}

// TestCertificates: a key certified by a CA the allowed signers trust
// (cert-authority) signs for a principal of its certificate; an expired
// certificate and a principal the line does not name are refused.
func TestCertificates(t *testing.T) {
	dir := t.TempDir()
	packPath := filepath.Join(dir, "p.ppdf")
	os.WriteFile(packPath, pack, 0o644)
	ca := keygen(t, dir, "ca", "ed25519")
	allowed := write(t, filepath.Join(dir, "allowed"), `*@example.com cert-authority `+pubLine(t, ca)+"\n")
	signers, err := ReadAllowedSigners(allowed)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, principal, validity string
		want                      error
	}{
		{"valid", principal, "-1d:+1d", nil},
		{"expired", principal, "-3d:-1d", ErrExpired},
		{"other principal", "someone@elsewhere.org", "-1d:+1d", ErrUnknownSigner},
	} {
		sub := filepath.Join(dir, tc.name)
		os.Mkdir(sub, 0o755)
		user := keygen(t, sub, "user", "ed25519")
		sshKeygen(t, "-q", "-s", ca, "-I", "build-"+tc.name, "-n", tc.principal, "-V", tc.validity, user+".pub")
		// ssh-keygen signs with the certificate when -f names it
		os.Remove(packPath + SigSuffix)
		sshKeygen(t, "-Y", "sign", "-f", user+"-cert.pub", "-n", Namespace, packPath)
		sig, _ := os.ReadFile(packPath + SigSuffix)
		s, err := Verify(pack, sig, Policy{Signers: signers})
		if tc.want == nil {
			if err != nil || s.Principals[0] != principal {
				t.Errorf("%s: %v %v", tc.name, s, err)
			}
			if ok, out := opensshVerify(t, packPath, packPath+SigSuffix, allowed, ""); !ok {
				t.Errorf("%s: ssh-keygen refuses: %s", tc.name, out)
			}
			continue
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
}

// TestAllowedSignersSyntax: what ssh-keygen(1) documents parses; what a
// file cannot mean is an error naming the line.
func TestAllowedSignersSyntax(t *testing.T) {
	const key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMDOiTmPdq5mpwfOsPtjYl8wMH3mPbFykgvcaECBgqD7"
	good := strings.Join([]string{
		"# comment",
		"",
		"a@example.com " + key,
		`"b@example.com,c d@example.com" ` + key + " a comment",
		`*@example.com namespaces="gprobes,git",valid-after="20240101",valid-before="202601021504Z" ` + key,
		`e@example.com cert-authority ` + key,
		`f@example.com valid-after="20240101120000" ` + key,
	}, "\n")
	a, err := ParseAllowedSigners("good", []byte(good))
	if err != nil || len(a.entries) != 5 {
		t.Fatalf("%v %+v", err, a)
	}
	if e := a.entries[1]; fmt.Sprint(e.principals) != "[b@example.com c d@example.com]" {
		t.Errorf("quoted principals: %q", e.principals)
	}
	if e := a.entries[2]; len(e.namespaces) != 2 || e.validBefore != time.Date(2026, 1, 2, 15, 4, 0, 0, time.UTC) || e.validAfter.IsZero() {
		t.Errorf("options: %+v", e)
	}
	if !a.entries[3].ca {
		t.Error("cert-authority not read")
	}
	for _, bad := range []string{
		"a@example.com",
		"a@example.com ssh-ed25519 notbase64",
		`"a@example.com ` + key,
		`a@example.com unknown-option ` + key,
		`a@example.com valid-after="2024" ` + key,
		`a@example.com valid-before=20240101 ` + key,
	} {
		if _, err := ParseAllowedSigners("bad", []byte("# first\n"+bad+"\n")); err == nil || !strings.HasPrefix(err.Error(), "bad:2: ") {
			t.Errorf("%q: %v", bad, err)
		}
	}
	if !matchList("gprobes", []string{"git", "gp*"}) || matchList("gprobes", []string{"*", "!gprobes"}) || matchList("gprobes", []string{"file"}) {
		t.Error("matchList")
	}
}

// TestSignKeys: an encrypted key opens with $GPROBES_SIGN_PASSPHRASE, and
// without it the refusal says how to give it.
func TestSignKeys(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "enc")
	sshKeygen(t, "-q", "-t", "ed25519", "-N", "secret", "-f", key)
	t.Setenv("SSH_AUTH_SOCK", "")
	os.Unsetenv(PassphraseEnv)
	if _, err := Sign(pack, key); err == nil || !strings.Contains(err.Error(), PassphraseEnv) {
		t.Errorf("encrypted key without a passphrase: %v", err)
	}
	t.Setenv(PassphraseEnv, "wrong")
	if _, err := Sign(pack, key); err == nil || !strings.Contains(err.Error(), "does not open it") {
		t.Errorf("wrong passphrase: %v", err)
	}
	t.Setenv(PassphraseEnv, "secret")
	sig, err := Sign(pack, key)
	if err != nil {
		t.Fatal(err)
	}
	signers, _ := ParseAllowedSigners("a", []byte(principal+" "+pubLine(t, key)))
	if _, err := Verify(pack, sig, Policy{Signers: signers}); err != nil {
		t.Error(err)
	}
	if _, err := Sign(pack, filepath.Join(dir, "nothing")); err == nil {
		t.Error("a missing key signs")
	}
}
