/*
 * domu-run: run a shell command in a PV domU of the gprobes Xen lab
 * (lab/xenlab), from dom0, and print its output.
 *
 *   domu-run [-t SECONDS] DOMID|NAME COMMAND...
 *
 * The domU's PID 1 runs xlab-serve on its console (hvc0). xenconsoled
 * connects that console to a pty in dom0 whose path it writes to xenstore
 * at /local/domain/<domid>/console/tty. domu-run opens that pty, types
 *   XLABCMD <tag> - <command>
 * and reads the console until "XLAB <tag> RC <status> <lines> <bytes>",
 * printing the "XLAB <tag> O <line>" lines in between (see xlab-serve).
 * Lines with other tags (console output of earlier commands, kernel
 * messages) are ignored, so stale console data does no harm.
 *
 * Exit status: the command's; 124 on timeout (default 60 s); 125 when
 * domu-run itself fails (messages start with "domu-run:" on stderr).
 * Runs on one domU serialize on /run/domu-run-<domid>.lock.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

static void fail(const char *fmt, ...)
{
	va_list ap;
	fputs("domu-run: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(125);
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* First line of a command's output, trailing white space removed. */
static char *first_line(const char *cmd)
{
	static char buf[512];
	FILE *f = popen(cmd, "r");
	if (!f)
		fail("popen %s: %s", cmd, strerror(errno));
	if (!fgets(buf, sizeof buf, f))
		buf[0] = 0;
	pclose(f);
	size_t n = strlen(buf);
	while (n > 0 && isspace((unsigned char)buf[n - 1]))
		buf[--n] = 0;
	return buf;
}

static void write_all(int fd, const char *p, size_t n, double deadline)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w > 0) {
			p += w;
			n -= w;
			continue;
		}
		if (w < 0 && errno != EAGAIN && errno != EINTR)
			fail("write console: %s", strerror(errno));
		struct pollfd pf = {.fd = fd, .events = POLLOUT};
		int ms = (int)((deadline - now()) * 1000);
		if (ms <= 0)
			fail("timeout writing to the console");
		poll(&pf, 1, ms > 100 ? 100 : ms);
	}
}

int main(int argc, char **argv)
{
	int timeout = 60, opt;
	while ((opt = getopt(argc, argv, "+t:")) != -1) {
		if (opt == 't')
			timeout = atoi(optarg);
		else
			fail("usage: domu-run [-t SECONDS] DOMID|NAME COMMAND...");
	}
	if (argc - optind < 2)
		fail("usage: domu-run [-t SECONDS] DOMID|NAME COMMAND...");
	const char *dom = argv[optind];
	char q[600];

	/* the domid */
	int domid;
	const char *s = dom;
	while (*s && isdigit((unsigned char)*s))
		s++;
	if (*dom && !*s) {
		domid = atoi(dom);
	} else {
		for (s = dom; *s; s++)
			if (!isalnum((unsigned char)*s) && *s != '-' && *s != '_' && *s != '.')
				fail("bad domain name %s", dom);
		snprintf(q, sizeof q, "xl domid %s 2>/dev/null", dom);
		char *id = first_line(q);
		if (!*id || !isdigit((unsigned char)*id))
			fail("no domain %s", dom);
		domid = atoi(id);
	}

	/* the command: the remaining arguments joined with spaces */
	size_t clen = 0;
	for (int i = optind + 1; i < argc; i++)
		clen += strlen(argv[i]) + 1;
	char *cmd = malloc(clen + 1);
	cmd[0] = 0;
	for (int i = optind + 1; i < argc; i++) {
		if (i > optind + 1)
			strcat(cmd, " ");
		strcat(cmd, argv[i]);
	}
	for (s = cmd; *s; s++)
		if ((unsigned char)*s < 0x20 && *s != '\t')
			fail("control character 0x%02x in the command (one line only)", *s);
	if (strlen(cmd) > 3800)
		fail("command longer than 3800 bytes");

	/* the console pty */
	snprintf(q, sizeof q, "xenstore-read /local/domain/%d/console/tty 2>/dev/null", domid);
	char tty[512];
	snprintf(tty, sizeof tty, "%s", first_line(q));
	if (strncmp(tty, "/dev/", 5) != 0)
		fail("domain %d has no console pty in xenstore (is xenconsoled running?)", domid);
	snprintf(q, sizeof q, "/run/domu-run-%d.lock", domid);
	int lk = open(q, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (lk < 0 || flock(lk, LOCK_EX) < 0)
		fail("lock %s: %s", q, strerror(errno));
	int fd = open(tty, O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		fail("open %s: %s", tty, strerror(errno));
	struct termios t;
	if (tcgetattr(fd, &t) == 0) {
		cfmakeraw(&t);
		tcsetattr(fd, TCSANOW, &t);
	}
	tcflush(fd, TCIFLUSH);

	char tag[64], prefix[80];
	snprintf(tag, sizeof tag, "d%d.%d.%ld", domid, (int)getpid(), (long)time(NULL));
	int plen = snprintf(prefix, sizeof prefix, "XLAB %s ", tag);
	size_t mlen = strlen(tag) + strlen(cmd) + 16;
	char *msg = malloc(mlen);
	snprintf(msg, mlen, "XLABCMD %s - %s\n", tag, cmd);

	double start = now(), deadline = start + timeout, sent = start;
	int started = 0, attempts = 1;
	write_all(fd, msg, strlen(msg), deadline);

	size_t cap = 1 << 16, len = 0, ocap = 1 << 16, olen = 0;
	char *buf = malloc(cap), *out = malloc(ocap);
	long nlines = 0;
	for (;;) {
		double left = deadline - now();
		if (left <= 0) {
			fwrite(out, 1, olen, stdout);
			fail("timeout after %d s (command %s)", timeout, started ? "started, not finished" : "not acknowledged");
		}
		/* not acknowledged: the line got lost (domU not ready yet?); type it again */
		if (!started && now() - sent > 10 && attempts < 5) {
			write_all(fd, "\n", 1, deadline);
			write_all(fd, msg, strlen(msg), deadline);
			sent = now();
			attempts++;
		}
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		int ms = (int)(left * 1000);
		poll(&pf, 1, ms > 500 ? 500 : ms + 1);
		if (len + 4096 > cap)
			buf = realloc(buf, cap *= 2);
		ssize_t n = read(fd, buf + len, cap - len - 1);
		if (n < 0 && errno != EAGAIN && errno != EINTR && errno != EIO)
			fail("read %s: %s", tty, strerror(errno));
		if (n <= 0)
			continue;
		len += n;
		char *p = buf, *nl;
		while ((nl = memchr(p, '\n', buf + len - p)) != NULL) {
			*nl = 0;
			size_t l = nl - p;
			if (l > 0 && p[l - 1] == '\r')
				p[--l] = 0;
			if (strncmp(p, prefix, plen) == 0) {
				char *r = p + plen;
				if (strcmp(r, "START") == 0 || strcmp(r, "DUP") == 0) {
					started = 1;
				} else if (strncmp(r, "BAD", 3) == 0) {
					if (attempts >= 5)
						fail("the domU rejected the command %d times", attempts);
					write_all(fd, msg, strlen(msg), deadline);
					sent = now();
					attempts++;
				} else if (r[0] == 'O' && (r[1] == ' ' || r[1] == 0)) {
					const char *text = r[1] ? r + 2 : "";
					size_t tl = strlen(text);
					while (olen + tl + 2 > ocap)
						out = realloc(out, ocap *= 2);
					memcpy(out + olen, text, tl);
					olen += tl;
					out[olen++] = '\n';
					nlines++;
				} else if (strncmp(r, "RC ", 3) == 0) {
					int rc = 0;
					long want = -1;
					sscanf(r + 3, "%d %ld", &rc, &want);
					fwrite(out, 1, olen, stdout);
					fflush(stdout);
					if (want >= 0 && want != nlines)
						fail("got %ld output lines, the domU sent %ld", nlines, want);
					return rc;
				}
			}
			p = nl + 1;
		}
		memmove(buf, p, buf + len - p);
		len = buf + len - p;
	}
}
