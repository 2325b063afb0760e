/* cli.h - what the `stasis` subcommands share.
 *
 * main.c only dispatches: it loads the configuration, finds the subcommand in
 * its table and calls it. Each cmd_*.c file holds related subcommands. A
 * subcommand returns the process exit status: 0 success, 1 failure (the check
 * failed, the operation failed), 2 bad usage or bad input.
 */
#ifndef STASIS_CLI_CLI_H
#define STASIS_CLI_CLI_H

#include <stddef.h>
#include <stdint.h>

struct store;

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

struct cli_command {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
	const char *usage;     /* full --help text */
};

/* Print "stasis: <cmd>: <message>" on stderr, once, on one line. */
void cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Print a subcommand's usage (to stdout for --help, stderr on misuse). */
int cli_usage(const struct cli_command *cmd, int to_stderr);
const struct cli_command *cli_find(const char *name);

/* "1.5 GiB" */
void cli_human_size(uint64_t bytes, char *buf, size_t len);

/* The checkpoint root: --dir if given, else the configured tier's directory. */
const char *cli_root(const char *dir_option);
/* Open the store of a job under root. job may be NULL when root holds exactly
 * one job. Refuses a root or job that does not exist (never creates it). */
int cli_open_job(const char *cmd, const char *root, const char *job, struct store **out);

/* Progress on a terminal (progress.c, docs/cli.md): a thread calls fn every
 * 200 ms for the line ("stasis: <cmd> ...", filled into line) and draws it
 * on stderr once the command has run for a second; fn returns 1 when the
 * work it shows is over (the line is cleared). cli_progress_start returns
 * NULL, and nothing is ever drawn, when stderr is not a terminal (free_arg,
 * if given, frees arg then or at stop). cli_progress_stop clears the line:
 * call it before printing anything else. */
typedef int (*cli_progress_fn)(void *arg, char *line, size_t len);
struct cli_progress;
struct cli_progress *cli_progress_start(cli_progress_fn fn, void *arg, void (*free_arg)(void *));
void cli_progress_stop(struct cli_progress **p);
/* "stasis: <cmd> <name>: <done> of <total> (N%), <rate>", from *done (updated
 * by the command with __atomic stores); with total 0, "<done> read"; with
 * done NULL, the bytes this process read (/proc/self/io). */
struct cli_progress *cli_progress_bytes(const char *cmd, const char *name, uint64_t total,
					const uint64_t *done);
/* `stasis checkpoint` of job under root, watched from outside its coordinator
 * (call before the CHECKPOINT request); `stasis restart` of ckpt (NULL: the
 * one the restart selects). */
struct cli_progress *cli_progress_checkpoint(const char *root, const char *job);
struct cli_progress *cli_progress_restart(const char *root, const char *job, const char *ckpt);

/* Seconds on the monotonic clock. */
double cli_now(void);
/* Average rate of bytes done since the first call (or since they were last
 * 0): "850.0 MiB/s"; "-" for the first half second. */
struct cli_rate {
	int started;
	double t0;
};
void cli_rate(struct cli_rate *r, uint64_t bytes, char *buf, size_t len);

/* Parse the common option --help, returning 1 if it was given. */
int cli_wants_help(int argc, char **argv);

int cmd_inspect(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_extract(int argc, char **argv);
int cmd_ls(int argc, char **argv);
int cmd_prune(int argc, char **argv);
int cmd_save(int argc, char **argv);
int cmd_config(int argc, char **argv);
int cmd_faults(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_checkpoint(int argc, char **argv);
int cmd_migrate(int argc, char **argv);
int cmd_predict(int argc, char **argv);
int cmd_restart(int argc, char **argv);
int cmd_standby(int argc, char **argv);
int cmd_status(int argc, char **argv);

#endif
