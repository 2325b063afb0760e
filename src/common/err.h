/* err.h - the last error message of this thread.
 *
 * Library functions return 0 or a negative errno. Where the errno alone would
 * not tell the user what went wrong (which file, which section, which byte),
 * the function also records a one-line message with err_set(); the caller
 * that reports to the user (the CLI, the application API) prints err_msg().
 * The message is per thread, so concurrent writers do not mix their errors.
 */
#ifndef STASIS_COMMON_ERR_H
#define STASIS_COMMON_ERR_H

/* Record a message for the calling thread; returns code (a negative errno) so
 * a caller can write `return err_set(-EIO, "...")`. */
int err_set(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The last message recorded by this thread, or "" if none. */
const char *err_msg(void);

/* Forget the last message (before an operation whose failure is reported). */
void err_clear(void);

#endif
