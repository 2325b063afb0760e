/* rwfile.c - a file updated in place and read back, as a database does:
 * every 10 ms the count of updates at offset 0 of rw.db is read, checked
 * against the program's own count, and written back one higher, with a
 * word per update in a ring of 64 after it. A restart from a checkpoint
 * taken before later updates must find the file as it was then
 * (PROC_FD_FILE_SAVED, docs/descriptors.md). */
#include "zdtm.h"

#include <fcntl.h>
#include <stdint.h>

static int fd;
static uint64_t count;

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
}

int main(void)
{
	uint64_t zero[65] = { 0 };

	fd = open("rw.db", O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0 || pwrite(fd, zero, sizeof(zero), 0) != (ssize_t)sizeof(zero))
		zdtm_fail("cannot make rw.db");
	zdtm_ready_tick(update);
	update();
	if (count < 2)
		zdtm_fail("only %llu updates", (unsigned long long)count);
	return zdtm_end();
}
