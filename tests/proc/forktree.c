/* forktree.c - a process tree through checkpoints and restarts
 * (docs/transparent.md, "Process trees"):
 *   W  writes numbered 8-byte records into a pipe, one every millisecond;
 *   R  reads them from the pipe and checks that none is lost, doubled or out
 *      of order (what the pipe held at a checkpoint must come back);
 *   S  and the parent append records to one file through one descriptor
 *      they share since the fork (one offset: no record may overwrite
 *      another);
 *   Z  ends at once with status 7 and stays a zombie until the end;
 * and one page of MAP_SHARED anonymous memory, made before the forks,
 * carries the counts: after the restarts the children's writes must still
 * reach the parent.
 * After "stop": W and S stop, R reads to the end of the pipe; the parent
 * waits for each child (Z with 7) and checks the file and the counts. */
#include "zdtm.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

struct shared {
	volatile uint64_t w_sent, r_got, s_wrote;
	volatile int r_bad;
};

static void tick_ms(void)
{
	struct timespec ts = { 0, 1000 * 1000 };

	nanosleep(&ts, NULL);
}

static int stopped(void)
{
	return access("stop", F_OK) == 0;
}

static int put_record(int fd, char tag, uint64_t n)
{
	char rec[9];

	snprintf(rec, sizeof(rec), "%c%06llu\n", tag, (unsigned long long)(n % 1000000));
	return write(fd, rec, 8) == 8 ? 0 : -1;
}

int main(void)
{
	struct shared *sh = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	int p[2], file, status;
	pid_t w, r, s, z;
	uint64_t mine = 0, np = 0, ns = 0;
	struct stat st;
	char *buf;

	if (sh == MAP_FAILED || pipe(p) != 0)
		zdtm_fail("setup");
	file = open("shared.txt", O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (file < 0)
		zdtm_fail("open");
	memset((void *)sh, 0, sizeof(*sh));

	z = fork();
	if (z == 0)
		_exit(7);
	w = fork();
	if (w == 0) {
		close(p[0]);
		for (uint64_t i = 1; !stopped(); i++) {
			if (write(p[1], &i, sizeof(i)) != sizeof(i))
				_exit(1);
			sh->w_sent = i;
			tick_ms();
		}
		_exit(0);
	}
	r = fork();
	if (r == 0) {
		uint64_t v, expect = 1;
		ssize_t n;

		close(p[1]);
		while ((n = read(p[0], &v, sizeof(v))) == sizeof(v)) {
			if (v != expect)
				sh->r_bad = 1;
			expect = v + 1;
			sh->r_got = v;
		}
		_exit(n == 0 ? 0 : 1);
	}
	s = fork();
	if (s == 0) {
		close(p[0]);
		close(p[1]);
		for (uint64_t i = 1; !stopped(); i++) {
			if (put_record(file, 'S', i) != 0)
				_exit(1);
			sh->s_wrote = i;
			tick_ms();
		}
		_exit(0);
	}
	close(p[0]);
	close(p[1]);
	if (z < 0 || w < 0 || r < 0 || s < 0)
		zdtm_fail("fork");
	printf("READY\n");
	fflush(stdout);
	while (!stopped()) {
		if (put_record(file, 'P', ++mine) != 0)
			zdtm_fail("write");
		tick_ms();
	}

	if (waitpid(w, &status, 0) != w || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		zdtm_fail("the pipe's writer: status %#x", status);
	if (waitpid(r, &status, 0) != r || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		zdtm_fail("the pipe's reader: status %#x", status);
	if (waitpid(s, &status, 0) != s || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		zdtm_fail("the file's other writer: status %#x", status);
	if (waitpid(z, &status, 0) != z || !WIFEXITED(status) || WEXITSTATUS(status) != 7)
		zdtm_fail("the zombie: status %#x", status);
	if (sh->r_bad || sh->w_sent == 0 || sh->r_got != sh->w_sent)
		zdtm_fail("pipe: %llu sent, %llu received, %s", (unsigned long long)sh->w_sent,
			  (unsigned long long)sh->r_got, sh->r_bad ? "out of order" : "in order");
	/* every record whole: none overwrote another */
	if (fstat(file, &st) != 0 || st.st_size % 8 != 0)
		zdtm_fail("file size %lld", (long long)st.st_size);
	buf = malloc((size_t)st.st_size + 1);
	if (!buf || pread(file, buf, (size_t)st.st_size, 0) != st.st_size)
		zdtm_fail("read back");
	for (off_t o = 0; buf && o < st.st_size; o += 8) {
		if (buf[o + 7] != '\n' || (buf[o] != 'P' && buf[o] != 'S'))
			zdtm_fail("a record overwritten at %lld", (long long)o);
		np += buf[o] == 'P';
		ns += buf[o] == 'S';
	}
	if (np != mine || ns != sh->s_wrote || ns == 0)
		zdtm_fail("file: %llu P records of %llu, %llu S records of %llu", (unsigned long long)np,
			  (unsigned long long)mine, (unsigned long long)ns, (unsigned long long)sh->s_wrote);
	printf("records %llu %llu %llu\n", (unsigned long long)sh->w_sent, (unsigned long long)np,
	       (unsigned long long)ns);
	return zdtm_end();
}
