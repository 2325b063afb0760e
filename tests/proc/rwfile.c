/* rwfile.c - a file updated in place and read back, as a database does:
 * every 10 ms the count of updates at offset 0 of rw.db is read, checked
 * against the program's own count, and written back one higher, with a
 * word per update in a ring of 64 after it. A restart from a checkpoint
 * taken before later updates must find the file as it was then
 * (PROC_FD_FILE_SAVED, docs/descriptors.md).
 *
 *   rwfile [closed]
 *
 * With "closed", every update also reads the previous count back from
 * last.txt, stamp.txt and linked.txt and writes the new one: into
 * last.txt with fopen "w" and fclose, into a file of mkstemp renamed over
 * stamp.txt, into an O_TMPFILE file named with linkat and renamed over
 * linked.txt; and it appends "update N" to log.txt (open O_APPEND,
 * close): files written and closed, which a restart must put back as they
 * were at the checkpoint (docs/transparent.md); at the end log.txt must
 * hold every update once, in order. */
#include "zdtm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fd, closed;
static uint64_t count;

/* name holds the previous update's count */
static void check_count(const char *name)
{
	unsigned long long got = 0;
	FILE *f = fopen(name, "r");

	if (!f || fscanf(f, "%llu", &got) != 1 || got != count - 1)
		zdtm_fail("%s holds update %llu, the program made %llu", name, got,
			  (unsigned long long)count - 1);
	if (f)
		fclose(f);
}

static void closed_files(void)
{
	unsigned long long n = (unsigned long long)count;
	char tmp[] = "stamp.XXXXXX", proc[40];
	FILE *f;
	int fd;

	if (count > 1) {
		check_count("last.txt");
		check_count("stamp.txt");
		check_count("linked.txt");
	}
	f = fopen("last.txt", "w");
	if (!f || fprintf(f, "%llu\n", n) < 0 || fclose(f) != 0)
		zdtm_fail("cannot write last.txt");
	/* a temporary file of mkstemp renamed over it */
	fd = mkstemp(tmp);
	if (fd < 0 || dprintf(fd, "%llu\n", n) < 0 || close(fd) || rename(tmp, "stamp.txt"))
		zdtm_fail("cannot replace stamp.txt");
	/* an unnamed file (O_TMPFILE) named linked.new with linkat, then
	 * renamed over linked.txt (linked.new, left by a run killed between
	 * the two, removed first: a restart does not remove files) */
	fd = open(".", O_TMPFILE | O_RDWR, 0600);
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	if (fd < 0 || dprintf(fd, "%llu\n", n) < 0 || (unlink("linked.new") && errno != ENOENT) ||
	    linkat(AT_FDCWD, proc, AT_FDCWD, "linked.new", AT_SYMLINK_FOLLOW) || close(fd) ||
	    rename("linked.new", "linked.txt"))
		zdtm_fail("cannot replace linked.txt");
	fd = open("log.txt", O_WRONLY | O_APPEND | O_CREAT, 0600);
	if (fd < 0 || dprintf(fd, "update %llu\n", n) < 0 || close(fd))
		zdtm_fail("cannot append to log.txt");
}

/* log.txt holds "update 1" to "update count", each once */
static void check_log(void)
{
	char line[64], want[64];
	uint64_t n = 0;
	FILE *f = fopen("log.txt", "r");

	while (f && fgets(line, sizeof(line), f)) {
		snprintf(want, sizeof(want), "update %llu\n", (unsigned long long)++n);
		if (strcmp(line, want) != 0) {
			zdtm_fail("log.txt's line %llu is %s", (unsigned long long)n, line);
			break;
		}
	}
	if (!f || n != count)
		zdtm_fail("log.txt holds %llu updates, the program made %llu", (unsigned long long)n,
			  (unsigned long long)count);
	if (f)
		fclose(f);
}

static void update(void)
{
	uint64_t got = UINT64_MAX, word = count * 2654435761u;

	if (zdtm_failed)
		return;
	if (pread(fd, &got, sizeof(got), 0) != (ssize_t)sizeof(got) || got != count) {
		zdtm_fail("rw.db holds %llu updates, the program made %llu", (unsigned long long)got,
			  (unsigned long long)count);
		return;
	}
	count++;
	if (pwrite(fd, &word, sizeof(word), (off_t)(8 + 8 * (count % 64))) != (ssize_t)sizeof(word) ||
	    pwrite(fd, &count, sizeof(count), 0) != (ssize_t)sizeof(count))
		zdtm_fail("cannot update rw.db");
	if (closed)
		closed_files();
}

int main(int argc, char **argv)
{
	uint64_t zero[65] = { 0 };

	closed = argc > 1 && !strcmp(argv[1], "closed");
	fd = open("rw.db", O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0 || pwrite(fd, zero, sizeof(zero), 0) != (ssize_t)sizeof(zero))
		zdtm_fail("cannot make rw.db");
	zdtm_ready_tick(update);
	update();
	if (count < 2)
		zdtm_fail("only %llu updates", (unsigned long long)count);
	if (closed && !zdtm_failed)
		check_log();
	return zdtm_end();
}
