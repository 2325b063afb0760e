/* line.h - the text lines of Stasis's protocols (docs/coordinator.md):
 * coordinator, node agents and ranks speak one line per message, ended by
 * a newline, and compare secrets without leaking where they differ. */
#ifndef STASIS_COMMON_LINE_H
#define STASIS_COMMON_LINE_H

#include <stdarg.h>
#include <stddef.h>

/* fmt with ap into buf (len >= 2) as one line: cut to fit, any newline
 * inside made a space, a newline at the end. Returns its length, or
 * -EINVAL when the format fails. */
int line_vformat(char *buf, size_t len, const char *fmt, va_list ap);

/* a and b are the same string, in a time that depends on their lengths
 * only (secrets) */
int line_secret_equal(const char *a, const char *b);

/* A TCP connection (SOCK_CLOEXEC, TCP_NODELAY) to addr, "host:port", in
 * *fd; what names the peer in messages. 0 or a negative errno with a
 * message in err_msg(). */
int line_connect(const char *addr, const char *what, int *fd);

/* A move into spares (docs/coordinator.md, "Moving a rank into a spare"):
 * the MOVE line names at most LINE_MOVE_RANKS_MAX ranks and fits in
 * LINE_MOVE_LEN; a move of more goes by the relaunch */
#define LINE_MOVE_RANKS_MAX 64
#define LINE_MOVE_LEN 1024

/* The checkpoint's WRITE line, args what follows the word: "" (every
 * rank writes its image), " ONLY <rank>..." (those ranks only: a move's,
 * the others drain and answer DONE 0 0) or " EXCEPT <rank>..." (every
 * other rank). 1 when rank writes. */
int line_write_names(const char *args, int rank);

#endif
