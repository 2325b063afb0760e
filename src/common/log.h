/* log.h - leveled logging to stderr.
 *
 * The level comes from the configuration key `log` (STASIS_LOG=error|warn|info|
 * debug; default warn). Every line is prefixed with "stasis[pid]: level:".
 */
#ifndef STASIS_COMMON_LOG_H
#define STASIS_COMMON_LOG_H

enum log_level { LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG };

/* Set the level; log_level_parse() returns -EINVAL for an unknown name. */
void log_set_level(enum log_level level);
int log_level_parse(const char *name, enum log_level *out);
enum log_level log_get_level(void);

void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Warnings and errors written so far by the process (a node agent keeps
 * its log file when there were any). */
unsigned log_warnings(void);

#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) do { if (log_get_level() >= LOG_DEBUG) log_msg(LOG_DEBUG, __VA_ARGS__); } while (0)

#endif
