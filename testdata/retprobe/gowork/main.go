// Command gowork is the Go program of the return-probe tests
// (ptrace/retprobe_test.go): goroutines call work, the probed function,
// and the program prints how many calls it made and the sum of their
// results, which a return probe on main.work must see exactly.
//
//	gowork flat|grow GOROUTINES N
//
// flat: each goroutine calls work N times. grow: goroutines are started
// in rounds, fresh (with small stacks); work calls a recursion deep
// enough to grow the goroutine's stack while work is in flight (the
// runtime copies the stack, work's frame with it), and it is called at
// the bottom of a descent of varying depth, so that its own prologue
// sometimes finds the stack too small and calls runtime.morestack (the
// call then starts again at its entry, on the new stack).
package main

import (
	"fmt"
	"os"
	"strconv"
	"sync"
)

var grow bool

//go:noinline
func work(x uint64) uint64 {
	if grow && x%3 == 0 {
		if deep(24) != 24 {
			panic("deep")
		}
	}
	return x*3 + 1
}

//go:noinline
func deep(n int) int {
	var pad [256]byte
	pad[n%256] = byte(n)
	if n == 0 {
		return int(pad[0])
	}
	return deep(n-1) + 1 + int(pad[(n+1)%256])
}

//go:noinline
func descend(k int, x uint64) uint64 {
	var pad [96]byte
	pad[k%96] = 1
	if k == 0 {
		return work(x)
	}
	return descend(k-1, x) + uint64(pad[(k+1)%96])
}

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: gowork flat|grow GOROUTINES N")
		os.Exit(2)
	}
	grow = os.Args[1] == "grow"
	g, _ := strconv.Atoi(os.Args[2])
	n, _ := strconv.Atoi(os.Args[3])
	var mu sync.Mutex
	var calls, sum uint64
	run := func(id, count int) {
		var c, s uint64
		for i := 0; i < count; i++ {
			x := uint64(id*1000000 + i)
			var r uint64
			if grow {
				r = descend(i%40, x)
			} else {
				r = work(x)
			}
			if r != x*3+1 {
				fmt.Printf("error work(%d) = %d\n", x, r)
				os.Exit(1)
			}
			c++
			s += r
		}
		mu.Lock()
		calls += c
		sum += s
		mu.Unlock()
	}
	var wg sync.WaitGroup
	if grow {
		// rounds of fresh goroutines, a few calls each
		per := 10
		for round := 0; round*g*per < g*n; round++ {
			for i := 0; i < g; i++ {
				wg.Add(1)
				go func(id int) { defer wg.Done(); run(id, per) }(round*g + i)
			}
			wg.Wait()
		}
	} else {
		for i := 0; i < g; i++ {
			wg.Add(1)
			go func(id int) { defer wg.Done(); run(id, n) }(i)
		}
		wg.Wait()
	}
	fmt.Printf("done calls %d sum %d\n", calls, sum)
}
