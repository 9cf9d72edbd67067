package packsign

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/hiddeco/sshsig"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// Namespace is the SSHSIG namespace of a probe pack's signature: the -n of
// ssh-keygen -Y sign and -Y verify. A signature made for another purpose
// (git commits, files) is not a pack's.
const Namespace = "gprobes"

// SigSuffix is appended to a pack's path to name its signature, as
// ssh-keygen -Y sign names the file it writes.
const SigSuffix = ".sig"

// PassphraseEnv names the environment variable Sign takes an encrypted
// private key's passphrase from (a build machine has no terminal to ask
// on); without it, the key is looked for in ssh-agent.
const PassphraseEnv = "GPROBES_SIGN_PASSPHRASE"

// Sign signs data (a whole PPDF file) with the private key at keyPath and
// returns the armored signature ("-----BEGIN SSH SIGNATURE-----"), to be
// written to the pack's path plus SigSuffix. keyPath is an OpenSSH or PEM
// private key; an encrypted one is opened with $GPROBES_SIGN_PASSPHRASE,
// or signed with by ssh-agent, as is a public key (KEY.pub) whose private
// half only the agent holds: ssh-keygen -Y sign does the same.
func Sign(data []byte, keyPath string) ([]byte, error) {
	signer, err := loadSigner(keyPath)
	if err != nil {
		return nil, fmt.Errorf("sign with %s: %w", keyPath, err)
	}
	sig, err := sshsig.Sign(bytes.NewReader(data), signer, sshsig.HashSHA512, Namespace)
	if err != nil {
		return nil, fmt.Errorf("sign with %s: %w", keyPath, err)
	}
	return sshsig.Armor(sig), nil
}

func loadSigner(keyPath string) (ssh.Signer, error) {
	b, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, err
	}
	signer, err := ssh.ParsePrivateKey(b)
	if err == nil {
		return signer, nil
	}
	var pub ssh.PublicKey
	var missing *ssh.PassphraseMissingError
	switch {
	case errors.As(err, &missing):
		if pass, ok := os.LookupEnv(PassphraseEnv); ok {
			s, err := ssh.ParsePrivateKeyWithPassphrase(b, []byte(pass))
			if err != nil {
				return nil, fmt.Errorf("the key is encrypted and $%s does not open it: %w", PassphraseEnv, err)
			}
			return s, nil
		}
		pub = missing.PublicKey
		if pub == nil {
			if p, _, _, _, err := ssh.ParseAuthorizedKey(mustRead(keyPath + ".pub")); err == nil {
				pub = p
			}
		}
		if pub == nil {
			return nil, fmt.Errorf("the key is encrypted: give its passphrase in $%s, or add it to ssh-agent with its .pub beside it", PassphraseEnv)
		}
	default:
		p, _, _, _, perr := ssh.ParseAuthorizedKey(b)
		if perr != nil {
			return nil, fmt.Errorf("not an SSH private key (nor a public key whose private key ssh-agent holds): %w", err)
		}
		pub = p
	}
	return agentSigner(pub)
}

func mustRead(path string) []byte {
	b, _ := os.ReadFile(path)
	return b
}

// agentSigner finds pub's private key in ssh-agent.
func agentSigner(pub ssh.PublicKey) (ssh.Signer, error) {
	fp := ssh.FingerprintSHA256(pub)
	sock := os.Getenv("SSH_AUTH_SOCK")
	if sock == "" {
		return nil, fmt.Errorf("the private key of %s is not in the file and no ssh-agent runs (SSH_AUTH_SOCK is not set): give the private key, or its passphrase in $%s", fp, PassphraseEnv)
	}
	conn, err := net.Dial("unix", sock)
	if err != nil {
		return nil, fmt.Errorf("ssh-agent at %s: %w", sock, err)
	}
	// the connection stays open for the signer's one signature; the
	// process exits soon after a build
	signers, err := agent.NewClient(conn).Signers()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("ssh-agent at %s: %w", sock, err)
	}
	for _, s := range signers {
		if bytes.Equal(s.PublicKey().Marshal(), pub.Marshal()) {
			return s, nil
		}
	}
	conn.Close()
	return nil, fmt.Errorf("ssh-agent at %s does not hold the key %s (ssh-add it)", sock, fp)
}

// KeyString names a public key as ssh-keygen -l does: "ED25519
// SHA256:...".
func KeyString(k ssh.PublicKey) string {
	t := k.Type()
	if c, ok := k.(*ssh.Certificate); ok {
		return fmt.Sprintf("certificate %s (key %s, serial %d, signed by CA %s)", ssh.FingerprintSHA256(c.Key), keyType(c.Key.Type()), c.Serial, KeyString(c.SignatureKey))
	}
	return keyType(t) + " " + ssh.FingerprintSHA256(k)
}

func keyType(t string) string {
	switch t {
	case ssh.KeyAlgoED25519:
		return "ED25519"
	case ssh.KeyAlgoRSA:
		return "RSA"
	case ssh.KeyAlgoECDSA256, ssh.KeyAlgoECDSA384, ssh.KeyAlgoECDSA521:
		return "ECDSA"
	case ssh.KeyAlgoSKED25519:
		return "ED25519-SK"
	case ssh.KeyAlgoSKECDSA256:
		return "ECDSA-SK"
	}
	return strings.ToUpper(t)
}
