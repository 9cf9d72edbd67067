// Package repocheck holds tests of the repository as a whole: what every
// source and documentation file must or must not say. It has no code.
package repocheck
