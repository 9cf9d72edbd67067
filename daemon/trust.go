package daemon

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/gprobes/gprobes/packsign"
	"github.com/gprobes/gprobes/rpn"
)

// Trust is what the daemon accepts (docs/ppdf.md, "The customer"): signed packs only, from
// whom, and whether modules may write their targets. Set before Listen.
type Trust struct {
	// RequireSigned refuses a pack without a good signature by a key of
	// AllowedSigners (and DPDF source, which insert sends unsigned).
	RequireSigned bool
	// AllowedSigners is an allowed_signers file, read at each insert (an
	// edit counts at once). With it, a signed pack is verified even
	// without RequireSigned; an unsigned one is then let in.
	AllowedSigners string
	// RevokedKeys lists public keys whose signatures are refused.
	RevokedKeys string
	// ReadOnly refuses modules that write their target (rpn.Writes).
	ReadOnly bool
}

// errNotSigned: a pack refused for its signature.
var errNotSigned = errors.New("signature refused")

// verify checks a pack's signature as the daemon's Trust says, before
// anything is decoded or any target opened. It returns the signer ("" when
// not verified).
func (t *Trust) verify(pack []byte, sig string) (string, int, error) {
	if t.AllowedSigners == "" || !t.RequireSigned && strings.TrimSpace(sig) == "" {
		return "", http.StatusOK, nil
	}
	pol := packsign.Policy{}
	var err error
	if pol.Signers, err = packsign.ReadAllowedSigners(t.AllowedSigners); err != nil {
		return "", http.StatusInternalServerError, fmt.Errorf("insert: the daemon's %v", err)
	}
	if t.RevokedKeys != "" {
		if pol.Revoked, err = packsign.ReadRevokedKeys(t.RevokedKeys); err != nil {
			return "", http.StatusInternalServerError, fmt.Errorf("insert: the daemon's %v", err)
		}
	}
	s, err := packsign.Verify(pack, []byte(sig), pol)
	if err != nil {
		how := "the daemon verifies signed packs against " + t.AllowedSigners
		if t.RequireSigned {
			how = "the daemon requires packs signed by a key of " + t.AllowedSigners + " (--require-signed)"
		}
		if errors.Is(err, packsign.ErrUnsigned) {
			err = fmt.Errorf("%w: sign it (gprobes build --sign KEY, or ssh-keygen -Y sign -n %s) and insert the PPDF with its .sig", err, packsign.Namespace)
		}
		return "", http.StatusForbidden, fmt.Errorf("insert: %w: %s: %w", errNotSigned, how, err)
	}
	return s.String(), http.StatusOK, nil
}

// readOnly refuses a module that writes its target when the daemon is
// read-only.
func (t *Trust) readOnly(builds []*rpn.Module) error {
	if !t.ReadOnly {
		return nil
	}
	for _, m := range builds {
		if s := rpn.WritesSummary(rpn.Writes(m)); s != "" {
			return fmt.Errorf("insert %s: the daemon is read-only (--read-only) and the module writes its target: %s", m.Name, s)
		}
	}
	return nil
}
