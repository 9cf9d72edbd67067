//go:build linux

package bpf

// WithTPBTF makes o's KindFentry program a BTF raw tracepoint (tp_btf)
// on the tracepoint name: the program type and context of fentry (u64
// arguments), loadable and attachable where fentry is not (this host).
func WithTPBTF(o Options, name string) Options {
	o.tpBTF = name
	return o
}

// RawRPN is the RPN instruction (absolute index) of each raw eBPF
// instruction, -1 for glue.
func (c *Compiled) RawRPN() []int { return c.rpn }
