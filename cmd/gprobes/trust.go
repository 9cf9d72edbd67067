package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/gprobes/gprobes/dpdf"
	"github.com/gprobes/gprobes/packsign"
)

// Signed packs (docs/ppdf.md, "Packs for customers"; package packsign): insert, run, check and disasm
// verify a pack's signature when given --allowed-signers, before the pack
// is decoded and before anything of a target is touched; the daemon does
// the same with its own flags (daemonTrust).

func trustFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "allowed-signers", Usage: "accept only a PPDF whose signature (FILE.ppdf.sig) is by a key of the allowed_signers `FILE` (ssh-keygen's format), verified before anything is inserted"},
		&cli.StringFlag{Name: "revoked-keys", Usage: "with --allowed-signers, refuse signatures by the public keys listed in `FILE` (one a line)"},
		&cli.StringFlag{Name: "signature", Usage: "the PPDF's signature is `SIG` (default: the PPDF's path plus .sig)"},
	}
}

// verifyPack reads the signature of the PPDF at path and, when the
// command was given --allowed-signers, verifies it over data: a refusal
// names its reason and nothing else is done. It returns the signature (nil
// if none) and who signed ("" when not verified).
func verifyPack(c *cli.Context, in *input, data []byte) (sig []byte, signer string, err error) {
	path := in.name
	if in.path != "" || c.String("signature") != "" { // a pack from standard input has no PACK.sig beside it
		if sig, err = packsign.ReadSignature(in.path, c.String("signature")); err != nil {
			return nil, "", cli.Exit(err.Error(), 1)
		}
	}
	file := c.String("allowed-signers")
	if file == "" {
		if c.String("revoked-keys") != "" {
			return nil, "", cli.Exit("--revoked-keys goes with --allowed-signers", 2)
		}
		return sig, "", nil
	}
	pol, err := policy(file, c.String("revoked-keys"))
	if err != nil {
		return nil, "", cli.Exit(err.Error(), 1)
	}
	s, err := packsign.Verify(data, sig, pol)
	if err != nil {
		sigName := c.String("signature")
		if sigName == "" {
			sigName = path + packsign.SigSuffix
		}
		return nil, "", cli.Exit(dpdf.Escape(fmt.Sprintf("%s: signature refused (%s, allowed signers %s): %v", path, sigName, file, err)), 1)
	}
	return sig, s.String(), nil
}

// refuseUnsigned refuses a DPDF when the command was given
// --allowed-signers: source is not a signed pack.
func refuseUnsigned(c *cli.Context, path string) error {
	if c.String("allowed-signers") == "" {
		return nil
	}
	return cli.Exit(fmt.Sprintf("%s: signature refused: %v: a DPDF is source, not a signed pack (build and sign it: gprobes build --sign KEY)", path, packsign.ErrUnsigned), 1)
}

// policy reads an allowed_signers file and, if given, a revoked-keys file.
func policy(allowed, revoked string) (packsign.Policy, error) {
	var pol packsign.Policy
	var err error
	if pol.Signers, err = packsign.ReadAllowedSigners(allowed); err != nil {
		return pol, err
	}
	if revoked != "" {
		if pol.Revoked, err = packsign.ReadRevokedKeys(revoked); err != nil {
			return pol, err
		}
	}
	return pol, nil
}
