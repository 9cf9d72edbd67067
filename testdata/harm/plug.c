// The library reload.c loads again after every rebuild; PAD moves plug.
#ifdef PAD
__attribute__((noinline)) long filler(long x) {
	long s = 0;
	for (int i = 0; i < PAD; i++) s = s * 31 + x + i;
	return s;
}
#endif
__attribute__((noinline)) long plug(long i) { return 3 * i; }
