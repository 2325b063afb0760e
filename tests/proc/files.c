/* files.c - descriptors across checkpoint/restart: files open for reading,
 * writing and appending at offsets, an unlinked open file, /dev/null, a
 * directory, a pipe holding data, and a thread blocked in read() on another
 * pipe; close-on-exec flags and descriptor numbers stay as they were. */
#include "zdtm.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int blocked_rd, blocked_wr;
static char blocked_got[16];
static atomic_int blocked_done;

static void *reader(void *arg)
{
	(void)arg;
	ssize_t n = read(blocked_rd, blocked_got, 5);   /* blocks across the checkpoint */

	if (n != 5)
		blocked_got[0] = 0;
	atomic_store(&blocked_done, 1);
	return NULL;
}

static void write_file(const char *name, const char *text)
{
	int fd = open(name, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	if (write(fd, text, strlen(text)) != (ssize_t)strlen(text))
		zdtm_fail("setup write %s", name);
	close(fd);
}

int main(void)
{
	int rd, wr, ap, un, nul, dir, p[2], q[2];
	char buf[64];
	pthread_t t;

	write_file("read.txt", "0123456789abcdef");
	write_file("append.txt", "head.");
	rd = open("read.txt", O_RDONLY);
	wr = open("write.txt", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ap = open("append.txt", O_WRONLY | O_APPEND);
	un = open("unlinked.txt", O_RDWR | O_CREAT | O_TRUNC, 0600);
	nul = open("/dev/null", O_WRONLY);
	dir = open(".", O_RDONLY | O_DIRECTORY);
	if (rd < 0 || wr < 0 || ap < 0 || un < 0 || nul < 0 || dir < 0 || pipe(p) || pipe(q)) {
		zdtm_fail("setup");
		return zdtm_end();
	}
	if (read(rd, buf, 4) != 4 || write(wr, "first", 5) != 5 || write(un, "secret data", 11) != 11 ||
	    write(p[1], "in the pipe", 11) != 11)
		zdtm_fail("setup io");
	unlink("unlinked.txt");
	lseek(un, 7, SEEK_SET);
	blocked_rd = q[0];
	blocked_wr = q[1];
	pthread_create(&t, NULL, reader, NULL);
	zdtm_ready();

	/* the same numbers, the same offsets */
	if (read(rd, buf, 4) != 4 || memcmp(buf, "4567", 4) != 0)
		zdtm_fail("read.txt: not at offset 4 after restart");
	if (write(wr, "second", 6) != 6)
		zdtm_fail("write.txt: cannot write");
	if (write(ap, "tail", 4) != 4)
		zdtm_fail("append.txt: cannot append");
	if (!(fcntl(wr, F_GETFD) & FD_CLOEXEC) || (fcntl(rd, F_GETFD) & FD_CLOEXEC))
		zdtm_fail("close-on-exec flags not restored");
	if ((fcntl(ap, F_GETFL) & O_APPEND) == 0)
		zdtm_fail("append.txt lost O_APPEND");
	memset(buf, 0, sizeof(buf));
	if (read(un, buf, 4) != 4 || memcmp(buf, "data", 4) != 0)
		zdtm_fail("unlinked file: '%s' at offset 7", buf);
	struct stat st;
	if (fstat(un, &st) != 0 || st.st_nlink != 0)
		zdtm_fail("unlinked file has a name again");
	if (write(nul, "x", 1) != 1)
		zdtm_fail("/dev/null");
	if (fstat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
		zdtm_fail("directory descriptor");
	memset(buf, 0, sizeof(buf));
	if (read(p[0], buf, 11) != 11 || memcmp(buf, "in the pipe", 11) != 0)
		zdtm_fail("pipe contents: '%s'", buf);
	if (write(p[1], "again", 5) != 5 || read(p[0], buf, 5) != 5)
		zdtm_fail("pipe after restart");
	if (write(blocked_wr, "hello", 5) != 5)
		zdtm_fail("write to the blocked reader's pipe");
	pthread_join(t, NULL);
	if (memcmp(blocked_got, "hello", 5) != 0)
		zdtm_fail("the thread blocked in read() did not get its data");
	close(wr);
	close(ap);
	int fd = open("write.txt", O_RDONLY);
	memset(buf, 0, sizeof(buf));
	if (read(fd, buf, sizeof(buf) - 1) < 0 || strcmp(buf, "firstsecond") != 0)
		zdtm_fail("write.txt holds '%s'", buf);
	close(fd);
	fd = open("append.txt", O_RDONLY);
	memset(buf, 0, sizeof(buf));
	if (read(fd, buf, sizeof(buf) - 1) < 0 || strncmp(buf, "head.tail", 9) != 0)
		zdtm_fail("append.txt holds '%s'", buf);
	close(fd);
	return zdtm_end();
}
