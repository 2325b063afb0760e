/* main.c - `stasis`: load the configuration, dispatch to a subcommand. */
#include "cli/cli.h"
#include "common/config.h"
#include "common/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/store.h"

static const struct cli_command commands[] = {
	{ "inspect", cmd_inspect, "print an image's manifest",
	  "usage: stasis inspect [--json | --decode] IMAGE\n"
	  "       stasis inspect --encode SECTION JSON\n"
	  "Print the manifest of IMAGE: format, metadata and sections.\n"
	  "  --json    print the manifest as stored (JSON)\n"
	  "  --decode  print the records of a process image as JSON: its sections\n"
	  "            process, fds, thread.<tid> and fd.<n>\n"
	  "  --encode  write to stdout the bytes of SECTION encoded from JSON, the\n"
	  "            output of --decode (- for stdin): the section as stored\n" },
	{ "verify", cmd_verify, "check every checksum of an image, a checkpoint or a job",
	  "usage: stasis verify PATH\n"
	  "PATH is an image file, a checkpoint directory (<root>/<job>/<ckpt>) or a job\n"
	  "directory (<root>/<job>). Reads every chunk and checks every checksum; exits 1\n"
	  "on the first problem, naming the file, the section and the offset.\n" },
	{ "ls", cmd_ls, "list checkpoints with state, size and time",
	  "usage: stasis ls [--dir D] [--json] [JOB]\n"
	  "List the checkpoints of JOB (of every job if JOB is not given) under the\n"
	  "checkpoint root D (default: the configured tier's directory).\n"
	  "States: CURRENT (the one a restart picks), COMPLETE, FAILED, PARTIAL (begun,\n"
	  "never committed: being written or abandoned; never used for restart).\n"
	  "  --json   one JSON document: jobs, their checkpoints, level, size, time\n"
	  "           (keys: docs/cli.md)\n" },
	{ "prune", cmd_prune, "remove old checkpoints",
	  "usage: stasis prune [--dir D] [JOB] --keep N\n"
	  "Keep the newest N complete checkpoints of JOB (and the current one); remove\n"
	  "older ones and abandoned partial or failed ones older than the newest\n"
	  "complete checkpoint. --keep defaults to the configuration key `keep`.\n" },
	{ "save", cmd_save, "checkpoint files into a new checkpoint of a job",
	  "usage: stasis save [--dir D] [--job JOB] FILE...\n"
	  "Write FILEs as sections of one image into a new checkpoint of JOB (default:\n"
	  "the configuration key `job`, else \"files\"), committing it in the index.\n" },
	{ "extract", cmd_extract, "write one section of an image to a file",
	  "usage: stasis extract IMAGE SECTION OUTPUT\n"
	  "Write the bytes of SECTION of IMAGE to OUTPUT (- for stdout), checking\n"
	  "every chunk's checksum.\n" },
	{ "run", cmd_run, "run a program with transparent checkpoints",
	  "usage: stasis run [--dir D] [--job NAME] [--interval T] [--level L] [--no-signal-checkpoint]\n"
	  "                  [--resume [--launcher \"WORDS\"]] [--recover none|auto]\n"
	  "                  [--max-restarts N] [--spares S] -- PROGRAM ARGS...\n"
	  "Run PROGRAM in the foreground under Stasis (LD_PRELOAD agent, docs/transparent.md)\n"
	  "and exit with its exit status (128+N if killed by signal N, 0 after\n"
	  "`stasis checkpoint --stop`). Checkpoints go to job NAME (default: the configured\n"
	  "`job`, else PROGRAM's file name) under D.\n"
	  "  --interval T   checkpoint every T (seconds, or with suffix s, m, h)\n"
	  "  --level L      a staged MPI job's redundancy: single, partner (each image\n"
	  "                 also on another node), rs (parity across nodes) or global (the\n"
	  "                 key `level`; docs/levels.md)\n"
	  "  --resume       if job NAME has an established checkpoint, restart it instead\n"
	  "                 (as `stasis restart`; --launcher as there): one batch script\n"
	  "                 then survives requeues and time limits\n"
	  "  --recover auto an MPI job whose rank or node fails is stopped and relaunched\n"
	  "                 from its newest usable checkpoint, a spare of the launcher's\n"
	  "                 host list in a lost node's place (none: the job ends; the\n"
	  "                 key `recover`)\n"
	  "  --max-restarts N  at most N relaunches (3; the key `max_restarts`)\n"
	  "  --spares S     an MPI job: S ranks more than the launcher's count, held in\n"
	  "                 reserve past MPI_Init (the key `spares`; docs/coordinator.md)\n"
	  "SIGTERM to stasis takes a checkpoint, then ends the program; SIGUSR1 takes one\n"
	  "and lets it run on (--no-signal-checkpoint: SIGTERM is passed on, SIGUSR1 ignored).\n" },
	{ "checkpoint", cmd_checkpoint, "checkpoint a running job now",
	  "usage: stasis checkpoint [--dir D] [JOB] [--stop] [--level L] [--wait LEVEL]\n"
	  "Ask JOB's coordinator (the only running job under D if JOB is not given) for a\n"
	  "checkpoint; print its name once it is established.\n"
	  "  --stop          then end the program\n"
	  "  --level L       this checkpoint's level instead of the job's (single, partner,\n"
	  "                  rs, global)\n"
	  "  --wait global   with staging on, return only once every rank's image is in the\n"
	  "                  global tier (local: as soon as it is established, the default;\n"
	  "                  partner, rs: once the node agents reached that level)\n" },
	{ "migrate", cmd_migrate, "move a node's ranks of a running MPI job to another node",
	  "usage: stasis migrate [--dir D] [JOB] --node N | --rank R [--to NODE]\n"
	  "Move the ranks of node N (or the node of rank R, with every rank on it) to NODE\n"
	  "(default: the first spare of the launcher's host list): the job is checkpointed\n"
	  "at a consistent point, the ranks' staged images go from N straight to NODE's\n"
	  "local directory, the job is relaunched with NODE in N's place, and nothing of\n"
	  "the job stays on N. Needs staging = on and a launcher host list\n"
	  "(docs/coordinator.md, \"Migration\"). A failure during the transfer hands over to\n"
	  "--recover auto (or, without it, the job goes on where it was).\n" },
	{ "predict", cmd_predict, "say that a node of a running MPI job will fail soon",
	  "usage: stasis predict [--dir D] [JOB] --node N --within DURATION\n"
	  "Node N is expected to fail within DURATION (60s, 2m): its ranks migrate\n"
	  "(stasis migrate) when the expected migration time fits, or else the job is\n"
	  "checkpointed at once, and --recover auto deals with the failure when it comes.\n" },
	{ "restart", cmd_restart, "restart a program from a checkpoint",
	  "usage: stasis restart [--dir D] [--interval T] [--no-signal-checkpoint]\n"
	  "                      [--launcher \"WORDS\"] [--recover none|auto] [--max-restarts N]\n"
	  "                      [--level L] [--spares S] [--lazy] [--standby]\n"
	  "                      [CKPT]\n"
	  "Restart the latest established checkpoint (or CKPT: JOB, JOB/ckpt-N, or ckpt-N\n"
	  "of the only job under D) in the foreground, in a new user and PID namespace\n"
	  "where the program keeps its pid and thread ids; exit with the program's status.\n"
	  "The restarted program is coordinated as under `stasis run`.\n"
	  "  --launcher W   an MPI job: start it with these launcher words instead of the\n"
	  "                 stored ones (\"mpiexec.mpich -hosts n3,n4 -n 4\": other nodes,\n"
	  "                 the other MPI), followed by the stored program and arguments\n"
	  "  --lazy         the program runs before its large runs of memory are in; they\n"
	  "                 come as it touches them (STASIS_RESTORE_LAZY=1; MPI ranks\n"
	  "                 restart lazily anyway)\n"
	  "  --standby      an MPI job: its stand-by's ranks (`stasis standby JOB`), past\n"
	  "                 MPI_Init already, restore CKPT; returns once every rank runs\n"
	  "                 (waits up to standby_wait, 120 s, for a stand-by just started)\n" },
	{ "standby", cmd_standby, "launch an MPI job's ranks to wait for a restart",
	  "usage: stasis standby [--dir D] [--interval T] [--no-signal-checkpoint]\n"
	  "                      [--launcher \"WORDS\"] [--recover none|auto] [--max-restarts N]\n"
	  "                      [--level L] [JOB]\n"
	  "Start the launcher of JOB's latest checkpoint (or --launcher's words, as for\n"
	  "`stasis restart`) with every rank waiting past MPI_Init, and coordinate the job:\n"
	  "`stasis restart --standby JOB[/CKPT]` then restores a checkpoint into those ranks\n"
	  "without a launch. Output and exit status are the restored program's; SIGTERM\n"
	  "before a restore ends the stand-by.\n" },
	{ "status", cmd_status, "show jobs, whether they run, and their checkpoints",
	  "usage: stasis status [--dir D] [--json]\n"
	  "One line per job under D: running, busy (a checkpoint or a restore is under\n"
	  "way) or stopped, its established checkpoints and the one a restart would pick.\n"
	  "  --json   one JSON document, the coordinator's answer in fields (docs/cli.md)\n" },
	{ "config", cmd_config, "show the configuration",
	  "usage: stasis config --list\n"
	  "       stasis config KEY\n"
	  "--list prints every key, its value and where the value came from (default,\n"
	  "file, or environment STASIS_<KEY>). KEY prints one value.\n" },
	{ "faults", cmd_faults, "list the fault points",
	  "usage: stasis faults\n"
	  "Print every fault point. Arm one with STASIS_FAULT=<name>[:<n>][:kill|:fail].\n" },
};

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

const struct cli_command *cli_find(const char *name)
{
	for (size_t i = 0; i < NCOMMANDS; i++)
		if (strcmp(commands[i].name, name) == 0)
			return &commands[i];
	return NULL;
}

void cli_error(const char *cmd, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (cmd)
		fprintf(stderr, "stasis: %s: %s\n", cmd, msg);
	else
		fprintf(stderr, "stasis: %s\n", msg);
}

int cli_usage(const struct cli_command *cmd, int to_stderr)
{
	fputs(cmd->usage, to_stderr ? stderr : stdout);
	return to_stderr ? EXIT_USAGE : EXIT_OK;
}

int cli_wants_help(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--") == 0)
			break;
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
			return 1;
	}
	return 0;
}

static void usage(FILE *out)
{
	fprintf(out, "usage: stasis [--config FILE] COMMAND [ARGS]\n"
		"       stasis --version | --help | COMMAND --help\n\ncommands:\n");
	for (size_t i = 0; i < NCOMMANDS; i++)
		fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
	fprintf(out, "\nConfiguration: /etc/stasis/stasis.conf or $STASIS_CONFIG, overridden by\n"
		"STASIS_<KEY> environment variables; see `stasis config --list`.\n");
}

int main(int argc, char **argv)
{
	const struct cli_command *cmd;
	const char *config = NULL;
	int i = 1;

	if (i < argc && strcmp(argv[i], "--config") == 0) {
		if (i + 1 >= argc) {
			cli_error(NULL, "--config needs a file");
			return EXIT_USAGE;
		}
		config = argv[i + 1];
		i += 2;
	}
	if (i >= argc) {
		usage(stderr);
		return EXIT_USAGE;
	}
	if (strcmp(argv[i], "--version") == 0 || strcmp(argv[i], "version") == 0) {
		printf("stasis %s\n", STASIS_VERSION);
		return EXIT_OK;
	}
	if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0 ||
	    strcmp(argv[i], "help") == 0) {
		if (i + 1 < argc && (cmd = cli_find(argv[i + 1])) != NULL)
			return cli_usage(cmd, 0);
		usage(stdout);
		return EXIT_OK;
	}
	cmd = cli_find(argv[i]);
	if (!cmd) {
		cli_error(NULL, "unknown command '%s' (see `stasis --help`)", argv[i]);
		return EXIT_USAGE;
	}
	if (cli_wants_help(argc - i, argv + i))
		return cli_usage(cmd, 0);
	if (cfg_load(config)) {
		cli_error(NULL, "%s", err_msg());
		return EXIT_USAGE;
	}
	return cmd->run(argc - i, argv + i);
}
