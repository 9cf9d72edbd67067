/*
 * gpwork: the guest workload of the gprobes QEMU lab (lab/qemulab).
 *
 * Built with `gcc -static -O2` into the lab initramfs as /bin/gpwork.
 * Every counted system call is issued with an inline `syscall` instruction,
 * never through a libc wrapper, so that the numbers this program prints are
 * exactly the number of times the guest kernel's system call paths ran on
 * its behalf. Output is written with one write(2) per line.
 *
 *   gpwork counts N [PATH...]
 *   gpwork loop [N [ROUNDS [PATH...]]]     (ROUNDS 0 or absent: forever)
 *   gpwork lat null|read|write|open N [PATH]
 *   gpwork hash ALG N [DATA]
 *
 * Exact system call trace of `gpwork counts N P1 P2` after libc's static
 * start-up (which issues none of getppid, read, write, openat):
 *
 *   openat(AT_FDCWD, "/dev/zero", O_RDONLY|O_CLOEXEC)  = Z   (3 under the lab init)
 *   openat(AT_FDCWD, "/dev/null", O_WRONLY|O_CLOEXEC)  = W   (4 under the lab init)
 *   getpid()
 *   write(1, "GPWORK pid <pid>\n")
 *   N x getppid()
 *   N x read(Z, buf, 1)
 *   N x write(W, buf, 1)
 *   N x { openat(AT_FDCWD, P1, O_RDONLY|O_CLOEXEC) = fd; close(fd) }
 *   N x { openat(AT_FDCWD, P2, O_RDONLY|O_CLOEXEC) = fd; close(fd) }
 *   close(Z); close(W)
 *   write(1, "GPWORK done getppid N read N write N open 2N\n")
 *   write(1, "GPWORK opened P1 N\n"); write(1, "GPWORK opened P2 N\n")
 *   exit_group(0)
 *
 * So for this pid: getppid N, read N (all on Z), write N on W plus one per
 * output line on fd 1, openat 2N on the paths plus the two device opens.
 * Every result is checked (getppid always the same value, read returns 1
 * and a zero byte, write returns 1, every open succeeds); on a mismatch it
 * prints "GPWORK error ..." and exits with status 1.
 *
 * `gpwork hash ALG N [DATA]` hashes DATA (default "abc") N times through the
 * kernel's AF_ALG socket interface (modules algif_hash and af_alg, and ALG's,
 * e.g. rmd160, all loaded on demand or by modprobe): socket, bind to
 * ("hash", ALG), accept, then N x { write(op, DATA) without MSG_MORE;
 * read(op, digest) }, each digest checked against the first. Each round is
 * one init, one update and one final of ALG's shash (rmd160_init,
 * rmd160_update, rmd160_final for rmd160) when DATA does not cross a page.
 *   GPWORK pid P
 *   GPWORK hash rmd160 N 8eb208f7e05d987a9b044a8e98c6b087f15a0bfc
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/if_alg.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>

static inline long sys0(long n)
{
	long r;
	__asm__ volatile("syscall" : "=a"(r) : "a"(n) : "rcx", "r11", "memory");
	return r;
}

static inline long sys1(long n, long a)
{
	long r;
	__asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a) : "rcx", "r11", "memory");
	return r;
}

static inline long sys3(long n, long a, long b, long c)
{
	long r;
	__asm__ volatile("syscall"
			 : "=a"(r)
			 : "a"(n), "D"(a), "S"(b), "d"(c)
			 : "rcx", "r11", "memory");
	return r;
}

static inline long sys4(long n, long a, long b, long c, long d)
{
	long r;
	register long r10 __asm__("r10") = d;
	__asm__ volatile("syscall"
			 : "=a"(r)
			 : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10)
			 : "rcx", "r11", "memory");
	return r;
}

#define x_getppid() sys0(SYS_getppid)
#define x_read(fd, b, n) sys3(SYS_read, (fd), (long)(b), (n))
#define x_write(fd, b, n) sys3(SYS_write, (fd), (long)(b), (n))
#define x_openat(p, fl) sys4(SYS_openat, AT_FDCWD, (long)(p), (fl), 0)
#define x_close(fd) sys1(SYS_close, (fd))

/* One formatted line, one write(2) on fd 1. */
static void out(const char *fmt, ...)
{
	char buf[4096];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if (n >= (int)sizeof buf)
		n = sizeof buf - 1;
	long off = 0;
	while (off < n) {
		long w = x_write(1, buf + off, n - off);
		if (w <= 0)
			break;
		off += w;
	}
}

static void die(const char *fmt, ...)
{
	char buf[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	out("GPWORK error %s\n", buf);
	sys1(SYS_exit_group, 1);
	for (;;)
		;
}

static void usage(void)
{
	out("usage: gpwork counts N [PATH...]\n"
	    "       gpwork loop [N [ROUNDS [PATH...]]]\n"
	    "       gpwork lat null|read|write|open N [PATH]\n"
	    "       gpwork hash ALG N [DATA]\n");
	sys1(SYS_exit_group, 2);
}

static long number(const char *s, const char *what)
{
	char *end;
	long v = strtol(s, &end, 10);
	if (*s == 0 || *end != 0 || v < 0)
		die("bad %s %s", what, s);
	return v;
}

static const char *default_paths[] = {"/etc/gp-a", "/etc/gp-b"};

struct work {
	long n;
	int npaths;
	const char **paths;
	long zfd, nfd;
	long ppid; /* first getppid result, -1 until known */
};

static void open_devices(struct work *w)
{
	w->zfd = x_openat("/dev/zero", O_RDONLY | O_CLOEXEC);
	if (w->zfd < 0)
		die("open /dev/zero errno %ld", -w->zfd);
	w->nfd = x_openat("/dev/null", O_WRONLY | O_CLOEXEC);
	if (w->nfd < 0)
		die("open /dev/null errno %ld", -w->nfd);
}

/* One round: N getppid, N read, N write, N opens of each path. */
static void round_(struct work *w, long round)
{
	long i, r;
	int p;
	unsigned char b;

	for (i = 0; i < w->n; i++) {
		r = x_getppid();
		if (w->ppid < 0)
			w->ppid = r;
		if (r != w->ppid || r < 0)
			die("getppid round %ld iter %ld returned %ld want %ld", round, i, r, w->ppid);
	}
	for (i = 0; i < w->n; i++) {
		b = 0xa5;
		r = x_read(w->zfd, &b, 1);
		if (r != 1 || b != 0)
			die("read round %ld iter %ld returned %ld byte %d", round, i, r, b);
	}
	for (i = 0; i < w->n; i++) {
		r = x_write(w->nfd, &b, 1);
		if (r != 1)
			die("write round %ld iter %ld returned %ld", round, i, r);
	}
	for (p = 0; p < w->npaths; p++) {
		for (i = 0; i < w->n; i++) {
			r = x_openat(w->paths[p], O_RDONLY | O_CLOEXEC);
			if (r < 0)
				die("open %s round %ld iter %ld errno %ld", w->paths[p], round, i, -r);
			x_close(r);
		}
	}
}

static int cmd_counts(int argc, char **argv)
{
	struct work w = {0};
	int p;

	if (argc < 1)
		usage();
	w.n = number(argv[0], "count");
	w.npaths = argc - 1;
	w.paths = (const char **)argv + 1;
	if (w.npaths == 0) {
		w.npaths = 2;
		w.paths = default_paths;
	}
	w.ppid = -1;
	open_devices(&w);
	out("GPWORK pid %ld\n", sys0(SYS_getpid));
	round_(&w, 1);
	x_close(w.zfd);
	x_close(w.nfd);
	out("GPWORK done getppid %ld read %ld write %ld open %ld\n", w.n, w.n, w.n, w.n * w.npaths);
	for (p = 0; p < w.npaths; p++)
		out("GPWORK opened %s %ld\n", w.paths[p], w.n);
	return 0;
}

static int cmd_loop(int argc, char **argv)
{
	struct work w = {0};
	long rounds = 0, r;

	w.n = 100;
	if (argc >= 1)
		w.n = number(argv[0], "count");
	if (argc >= 2)
		rounds = number(argv[1], "rounds");
	w.npaths = argc > 2 ? argc - 2 : 0;
	w.paths = (const char **)argv + 2;
	if (w.npaths == 0) {
		w.npaths = 2;
		w.paths = default_paths;
	}
	w.ppid = -1;
	open_devices(&w);
	out("GPWORK pid %ld\n", sys0(SYS_getpid));
	for (r = 1; rounds == 0 || r <= rounds; r++) {
		round_(&w, r);
		out("GPWORK round %ld getppid %ld read %ld write %ld open %ld\n", r, w.n, w.n, w.n,
		    w.n * w.npaths);
	}
	x_close(w.zfd);
	x_close(w.nfd);
	out("GPWORK loop done rounds %ld\n", rounds);
	return 0;
}

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* lmbench lat_syscall style: time N calls, print the mean in ns per call. */
static int cmd_lat(int argc, char **argv)
{
	struct work w = {0};
	const char *kind, *path = "/etc/gp-a";
	long n, i, warm, r;
	long long t0, t1;
	unsigned char b = 0;
	int k;

	if (argc < 2)
		usage();
	kind = argv[0];
	n = number(argv[1], "count");
	if (n == 0)
		die("count must be positive");
	if (argc >= 3)
		path = argv[2];
	if (!strcmp(kind, "null"))
		k = 0;
	else if (!strcmp(kind, "read"))
		k = 1;
	else if (!strcmp(kind, "write"))
		k = 2;
	else if (!strcmp(kind, "open"))
		k = 3;
	else
		die("unknown latency kind %s", kind);
	open_devices(&w);
	out("GPWORK pid %ld\n", sys0(SYS_getpid));
	warm = n / 10 < 1000 ? n / 10 : 1000;
	t0 = 0;
	for (int pass = 0; pass < 2; pass++) {
		long cnt = pass == 0 ? warm : n;
		if (pass == 1)
			t0 = now_ns();
		switch (k) {
		case 0:
			for (i = 0; i < cnt; i++)
				x_getppid();
			break;
		case 1:
			for (i = 0; i < cnt; i++)
				if ((r = x_read(w.zfd, &b, 1)) != 1)
					die("read returned %ld", r);
			break;
		case 2:
			for (i = 0; i < cnt; i++)
				if ((r = x_write(w.nfd, &b, 1)) != 1)
					die("write returned %ld", r);
			break;
		case 3:
			for (i = 0; i < cnt; i++) {
				r = x_openat(path, O_RDONLY | O_CLOEXEC);
				if (r < 0)
					die("open %s errno %ld", path, -r);
				x_close(r);
			}
			break;
		}
	}
	t1 = now_ns();
	out("GPWORK lat %s %.1f\n", kind, (double)(t1 - t0) / (double)n);
	return 0;
}

/* N hashes of DATA through AF_ALG; prints the digest. */
static int cmd_hash(int argc, char **argv)
{
	struct sockaddr_alg sa = {.salg_family = AF_ALG, .salg_type = "hash"};
	const char *alg, *data = "abc";
	unsigned char first[64], d[64];
	long n, i, r, len, dlen = -1;
	int tfm, op;
	char hex[2 * sizeof d + 1];

	if (argc < 2)
		usage();
	alg = argv[0];
	n = number(argv[1], "count");
	if (argc >= 3)
		data = argv[2];
	if (strlen(alg) >= sizeof sa.salg_name)
		die("algorithm name %s too long", alg);
	strcpy((char *)sa.salg_name, alg);
	len = strlen(data);
	tfm = socket(AF_ALG, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (tfm < 0)
		die("socket AF_ALG: %m");
	if (bind(tfm, (struct sockaddr *)&sa, sizeof sa) < 0)
		die("bind hash %s: %m", alg);
	op = accept(tfm, NULL, NULL);
	if (op < 0)
		die("accept: %m");
	out("GPWORK pid %ld\n", sys0(SYS_getpid));
	for (i = 0; i < n; i++) {
		r = x_write(op, data, len);
		if (r != len)
			die("hash write iter %ld returned %ld", i, r);
		r = x_read(op, d, sizeof d);
		if (r <= 0)
			die("hash read iter %ld returned %ld", i, r);
		if (dlen < 0) {
			dlen = r;
			memcpy(first, d, r);
		} else if (r != dlen || memcmp(first, d, r))
			die("hash iter %ld: digest differs from the first", i);
	}
	x_close(op);
	x_close(tfm);
	hex[0] = 0;
	for (i = 0; i < dlen; i++)
		sprintf(hex + 2 * i, "%02x", first[i]);
	out("GPWORK hash %s %ld %s\n", alg, n, hex);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		usage();
	if (!strcmp(argv[1], "counts"))
		return cmd_counts(argc - 2, argv + 2);
	if (!strcmp(argv[1], "loop"))
		return cmd_loop(argc - 2, argv + 2);
	if (!strcmp(argv[1], "lat"))
		return cmd_lat(argc - 2, argv + 2);
	if (!strcmp(argv[1], "hash"))
		return cmd_hash(argc - 2, argv + 2);
	usage();
	return 2;
}
