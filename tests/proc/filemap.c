/* filemap.c - a private file mapping with written pages (stored in the
 * image; the others come from the file) and a shared file mapping
 * (re-mapped from the file; writes after the restart reach the file). */
#include "zdtm.h"

#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PAGES 16

static int make_file(const char *name, int c)
{
	char page[4096];
	int fd = open(name, O_RDWR | O_CREAT | O_TRUNC, 0644);

	memset(page, c, sizeof(page));
	for (int i = 0; i < PAGES; i++)
		if (write(fd, page, sizeof(page)) != (ssize_t)sizeof(page))
			return -1;
	return fd;
}

int main(void)
{
	int pfd = make_file("private.dat", 'p'), sfd = make_file("shared.dat", 's');
	char *priv = mmap(NULL, PAGES * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE, pfd, 0);
	char *shr = mmap(NULL, PAGES * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, sfd, 0);
	char *ro = mmap(NULL, PAGES * 4096, PROT_READ, MAP_PRIVATE, pfd, 0);

	close(pfd);
	close(sfd);
	if (priv == MAP_FAILED || shr == MAP_FAILED || ro == MAP_FAILED) {
		zdtm_fail("setup");
		return zdtm_end();
	}
	memset(priv + 3 * 4096, 'W', 4096);        /* written (copied) page */
	(void)*(volatile char *)(priv + 5 * 4096); /* read only: stays the file's */
	memset(shr + 2 * 4096, 'S', 4096);
	zdtm_ready();
	for (int i = 0; i < PAGES; i++) {
		char want = i == 3 ? 'W' : 'p';

		if (priv[i * 4096] != want || priv[i * 4096 + 4095] != want)
			zdtm_fail("private page %d is '%c', not '%c'", i, priv[i * 4096], want);
		if (ro[i * 4096] != 'p')
			zdtm_fail("read-only page %d changed", i);
		if (shr[i * 4096] != (i == 2 ? 'S' : 's'))
			zdtm_fail("shared page %d is '%c'", i, shr[i * 4096]);
	}
	/* the shared mapping is the file's again: a write reaches the file */
	shr[7 * 4096] = 'X';
	msync(shr, PAGES * 4096, MS_SYNC);
	int fd = open("shared.dat", O_RDONLY);
	char c = 0;
	if (pread(fd, &c, 1, 7 * 4096) != 1 || c != 'X')
		zdtm_fail("a write to the shared mapping did not reach the file");
	close(fd);
	return zdtm_end();
}
