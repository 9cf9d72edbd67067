// A library with lib:call behind its semaphore (sys/sdt.h), dlopen'ed and
// dlclose'd by usdtdl.c (ptrace/usdt_test.go).
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

__extension__ unsigned short lib_call_semaphore __attribute__((unused)) __attribute__((section(".probes")));

long lib_call(long i) {
	if (__builtin_expect(lib_call_semaphore, 0)) {
		STAP_PROBE1(lib, call, i);
		return 1;
	}
	return 0;
}
