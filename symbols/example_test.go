package symbols_test

import (
	"fmt"

	"github.com/gprobes/gprobes/symbols"
)

func ExampleSet_Lookup() {
	t, err := symbols.Open("testdata/kallsyms")
	if err != nil {
		fmt.Println(err)
		return
	}
	s := symbols.NewSet(t)
	sym, _ := s.Lookup("ext4_file_open")
	fmt.Printf("%s %#x %c [%s]\n", sym.Name, sym.Addr, sym.Kind, sym.Module)
	_, err = s.Lookup("do_frok")
	fmt.Println(err)
	_, err = s.Lookup("init_module")
	fmt.Println(err)
	// Output:
	// ext4_file_open 0xffffffffc0a01000 t [ext4]
	// symbol "do_frok" not found in testdata/kallsyms (did you mean "do_fork"?)
	// symbol "init_module" is ambiguous: 2 definitions at different addresses and not exactly one of them global: 0xffffffffc0a02000 t [ext4] (testdata/kallsyms), 0xffffffffc0b00000 t [xfs] (testdata/kallsyms): write the address instead
}

func ExampleSet_Nearest() {
	t, _ := symbols.Open("testdata/kallsyms")
	s := symbols.NewSet(t)
	sym, off, ok := s.Nearest(0xffffffff810b0fa4)
	fmt.Printf("%s+%#x %v\n", sym.Name, off, ok)
	// Output: do_fork+0x14 true
}
