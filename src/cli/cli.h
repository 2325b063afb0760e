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
int cmd_restart(int argc, char **argv);
int cmd_status(int argc, char **argv);

#endif
