// Package hist is a log2 histogram printed the way bpftrace prints hist():
// a row a power of two, "[lo, hi)" with K, M, G, T, P, E for powers of
// 1024, the count, and a bar of @ fifty-two wide at the largest count.
// gprobes log --hist N uses it for the Nth word of each probe's records.
//
// The buckets are bpftrace's with its default k = 0: negative values in
// "(..., 0)", 0 and 1 in buckets of their own ("[0]", "[1]"), then
// [2, 4), [4, 8) ... up to [4E, 8E). A value is a signed 64-bit word, as
// bpftrace's are: one with its top bit set counts as negative.
package hist
