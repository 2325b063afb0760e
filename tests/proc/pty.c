/* pty.c - a pseudo-terminal pair the program opened itself keeps its
 * settings (termios, window size), the output its master has not read yet,
 * and the link between its ends across checkpoint/restart. */
#include "zdtm.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <termios.h>
#include <unistd.h>

int main(void)
{
	int m = posix_openpt(O_RDWR | O_NOCTTY), s, n = -1;
	struct winsize ws = { 33, 77, 0, 0 }, got;
	struct termios t;
	struct stat st;

	if (m < 0 || grantpt(m) != 0 || unlockpt(m) != 0 || (s = open(ptsname(m), O_RDWR | O_NOCTTY)) < 0) {
		zdtm_fail("setup: %s", strerror(errno));
		return zdtm_end();
	}
	tcgetattr(s, &t);
	t.c_lflag &= ~(tcflag_t)ECHO;
	t.c_cc[VINTR] = 'X';
	if (tcsetattr(s, TCSANOW, &t) != 0 || ioctl(m, TIOCSWINSZ, &ws) != 0 || write(s, "out\n", 4) != 4)
		zdtm_fail("setup settings");
	zdtm_ready();

	zdtm_expect(m, "out\r\n", "the master (what the slave wrote before the checkpoint)");
	if (tcgetattr(s, &t) != 0 || (t.c_lflag & ECHO) || t.c_cc[VINTR] != 'X' || !(t.c_oflag & OPOST))
		zdtm_fail("the slave's termios changed");
	if (ioctl(s, TIOCGWINSZ, &got) != 0 || got.ws_row != 33 || got.ws_col != 77)
		zdtm_fail("window size %dx%d, not 33x77", got.ws_row, got.ws_col);
	if (ioctl(m, TIOCGPTN, &n) != 0 || fstat(s, &st) != 0 || (int)minor(st.st_rdev) != n % 256)
		zdtm_fail("the slave is not the master's (pty %d)", n);
	if (write(m, "in\n", 3) != 3)
		zdtm_fail("write to the master");
	zdtm_expect(s, "in\n", "the slave");
	if (write(s, "a\n", 2) != 2)
		zdtm_fail("write to the slave");
	zdtm_expect(m, "a\r\n", "the master");
	return zdtm_end();
}
