package main

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"

	"github.com/gprobes/gprobes/bpf"
)

// kabilities is what list kernel:GLOB says of each function: whether a
// kprobe and fentry can take it on this host, as the kernel target
// decides (docs/kernel.md).
type kabilities struct {
	mech      bpf.Mechanisms
	black     map[string]bool // the kprobe blacklist
	blackErr  error
	ftrace    map[string]bool // available_filter_functions: what fentry (ftrace) can attach to
	ftraceErr error
}

func kernelAbilities() *kabilities {
	k := &kabilities{mech: bpf.Probe()}
	k.black, k.blackErr = readNames("/sys/kernel/debug/kprobes/blacklist", 1)
	if dir, err := bpf.EventsDir(); err != nil {
		k.ftraceErr = err
	} else {
		k.ftrace, k.ftraceErr = readNames(filepath.Join(filepath.Dir(dir), "available_filter_functions"), 0)
	}
	return k
}

// readNames reads the field'th word of each line of a file of the kernel.
func readNames(path string, field int) (map[string]bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fs := strings.Fields(sc.Text()); len(fs) > field {
			out[fs[field]] = true
		}
	}
	return out, sc.Err()
}

// kprobe says whether a kprobe can take the function: "yes", or "no: why".
func (k *kabilities) kprobe(name string) string {
	switch {
	case k.mech.Kprobe != nil:
		return "no: " + k.mech.Kprobe.Error()
	case k.black[name]:
		return "no: on the kernel's kprobe blacklist"
	case k.blackErr != nil:
		return "yes?: unless on the kprobe blacklist, which cannot be read (" + k.blackErr.Error() + ")"
	}
	return "yes"
}

// fentry says whether an fentry program can take the function's entry.
func (k *kabilities) fentry(name, module string) string {
	switch {
	case k.mech.Fentry != nil:
		return "no: " + k.mech.Fentry.Error()
	case module != "":
		return "no: a module's function: gprobes takes it with a kprobe (an fentry program would hold the module loaded)"
	case k.ftraceErr != nil:
		return "no: available_filter_functions cannot be read (" + k.ftraceErr.Error() + ")"
	case !k.ftrace[name]:
		return "no: not in available_filter_functions (notrace, or not ftrace's)"
	}
	if _, err := bpf.FuncArgs(name); err != nil {
		return "no: " + err.Error()
	}
	return "yes"
}

// tracepointFields are a tracepoint's own fields (not the common_ ones)
// declared as C does: "const char * filename", "char comm[16]".
func tracepointFields(group, event string) ([]string, error) {
	f, err := bpf.ReadFormat(group, event)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, fl := range f.Fields {
		if !fl.Common {
			out = append(out, cDecl(fl.Type, fl.Name))
		}
	}
	return out, nil
}

func tracefsEvents() (string, error) { return bpf.EventsDir() }
