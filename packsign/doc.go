// Package packsign signs PPDF probe packs and checks their signatures with
// the SSH keys a vendor already has (docs/ppdf.md, "Packs for customers"): the SSHSIG format
// of `ssh-keygen -Y sign`, namespace "gprobes", in a detached PACK.sig
// beside the pack, exactly the file ssh-keygen writes, so that
// `ssh-keygen -Y verify -n gprobes` checks a pack gprobes signed and
// gprobes accepts a pack ssh-keygen signed. Who may sign is an
// allowed_signers file (ssh-keygen(1), ALLOWED SIGNERS: principals,
// cert-authority, namespaces=, valid-after=, valid-before=), read here;
// revoked keys are a list of public keys (ssh-keygen -Y verify -r takes
// the same list). The SSHSIG blob and its armor come from
// github.com/hiddeco/sshsig, the keys from golang.org/x/crypto/ssh.
//
// The one trap: Verify checks a signature over the exact bytes given. A
// caller must verify the bytes it will decode and insert, never a file
// read again afterwards, and must verify before it attaches to, stops or
// writes anything of a target.
package packsign
