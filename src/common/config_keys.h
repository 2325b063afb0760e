/* config_keys.h - every configuration key of Stasis, in one list.
 *
 * CONFIG_KEY(id, "name", type, "default", min, max, "choices", "meaning")
 * Each key can be set in the configuration file (`name = value`) and
 * overridden by the environment variable STASIS_<NAME> (upper case).
 * type is STRING, CHOICE (one of the |-separated choices), UINT or SIZE (a
 * byte count with an optional K, M or G suffix); min and max bound UINT and
 * SIZE values. Defaults may use ${HOME} and ${UID}.
 */
CONFIG_KEY(LOG,            "log",            CHOICE, "warn", 0, 0, "error|warn|info|debug",
	   "logging level on stderr")
CONFIG_KEY(FAULT,          "fault",          STRING, "", 0, 0, "",
	   "fault points to arm: <name>[:<n>][:kill|:fail][,...] (see `stasis faults`)")
CONFIG_KEY(TIER,           "tier",           CHOICE, "global", 0, 0, "local|global",
	   "storage tier that commands use when --dir is not given")
CONFIG_KEY(GLOBAL_DIR,     "global_dir",     STRING, "${HOME}/stasis-checkpoints", 0, 0, "",
	   "root of the global tier (the parallel or shared file system)")
CONFIG_KEY(LOCAL_DIR,      "local_dir",      STRING, "/dev/shm/stasis-${UID}", 0, 0, "",
	   "root of the node-local tier (RAM disk or local SSD)")
CONFIG_KEY(JOB,            "job",            STRING, "", 0, 0, "",
	   "job name checkpoints are filed under (default: chosen by the producer)")
CONFIG_KEY(COMPRESS,       "compress",       CHOICE, "none", 0, 0, "none|zstd",
	   "per-chunk compression of images (all-zero pages are always elided)")
CONFIG_KEY(COMPRESS_LEVEL, "compress_level", UINT,   "1", 1, 19, "",
	   "zstd compression level")
CONFIG_KEY(THREADS,        "threads",        UINT,   "2", 0, 64, "",
	   "worker threads per image writer for checksums and compression (0: inline)")
CONFIG_KEY(CHUNK_SIZE,     "chunk_size",     SIZE,   "4M", 65536, 67108864, "",
	   "logical bytes per image chunk (a multiple of 4K)")
CONFIG_KEY(NODE,           "node",           STRING, "", 0, 0, "",
	   "this node's name (default: the hostname); lets one machine play several nodes")
CONFIG_KEY(LEVEL,          "level",          CHOICE, "single", 0, 0, "single|partner|rs|global",
	   "level of application checkpoints taken with STASIS_LEVEL_AUTO")
CONFIG_KEY(GLOBAL_EVERY,   "global_every",   UINT,   "0", 0, 1000000, "",
	   "with STASIS_LEVEL_AUTO, every N-th checkpoint goes to the global tier (0: never)")
CONFIG_KEY(GROUP_SIZE,     "group_size",     UINT,   "4", 2, 255, "",
	   "ranks (on distinct nodes) per Reed-Solomon group of the rs level")
CONFIG_KEY(RS_PARITY,      "rs_parity",      UINT,   "1", 1, 127, "",
	   "parity blocks per rs group: how many of its nodes may be lost at once")
CONFIG_KEY(ASYNC,          "async",          CHOICE, "on", 0, 0, "on|off",
	   "partner copies, rs parity and the global flush run on a progress thread (off: "
	   "stasis_checkpoint waits for them)")
CONFIG_KEY(GLOBAL_FLUSH,   "global_flush",   CHOICE, "off", 0, 0, "off|on",
	   "also copy every application checkpoint to the global tier, in the background")
CONFIG_KEY(PROGRESS_PRIORITY, "progress_priority", CHOICE, "idle", 0, 0, "idle|normal",
	   "scheduling of the progress thread: idle (SCHED_IDLE, only cycles the application "
	   "leaves) or normal")
CONFIG_KEY(LINK_ADDRESS,   "link_address",   STRING, "", 0, 0, "",
	   "address other ranks reach this one at for progress traffic: an IPv4 address or "
	   "an interface name (default: the hostname's address if it is this host's, else "
	   "the first IPv4 address of an interface that is up and not loopback)")
CONFIG_KEY(LINK_TIMEOUT,   "link_timeout",   UINT,   "600", 1, 86400, "",
	   "seconds a progress thread waits for another rank to connect before giving up")
CONFIG_KEY(RECYCLE,        "recycle",        CHOICE, "on", 0, 0, "on|off",
	   "write new checkpoints in the node cache over the files of pruned ones, and reserve "
	   "room for the first at stasis_protect (faster on a RAM disk; holds one more "
	   "checkpoint's memory until stasis_finalize)")
CONFIG_KEY(CACHE_KEEP,     "cache_keep",     UINT,   "2", 1, 1000, "",
	   "checkpoints kept in each node's local cache (a staged job's: its last "
	   "established ones)")
CONFIG_KEY(MTBF,           "mtbf",           UINT,   "86400", 1, 100000000, "",
	   "mean time between failures of the job, in seconds (Young/Daly interval)")
CONFIG_KEY(DIRECT_IO,      "direct_io",      CHOICE, "on", 0, 0, "on|off",
	   "write large checkpoint files with O_DIRECT where the file system allows it")
CONFIG_KEY(COORD_ADDRESS,  "coord_address",  STRING, "auto", 0, 0, "",
	   "IPv4 address the coordinator of an MPI job listens on for its ranks (auto: the "
	   "address this host's name resolves to, 127.0.0.1 when that is a loopback one)")
CONFIG_KEY(RECOVER,        "recover",        CHOICE, "none", 0, 0, "none|auto",
	   "what `stasis run` of an MPI job does when a rank or a node fails: none (the job ends "
	   "as its launcher says) or auto (stop it, relaunch from the latest established "
	   "checkpoint without the lost nodes; docs/coordinator.md)")
CONFIG_KEY(MAX_RESTARTS,   "max_restarts",   UINT,   "3", 0, 1000, "",
	   "recover = auto: relaunches at most, per run (then the job ends with its status)")
CONFIG_KEY(SPARES,         "spares",         UINT,   "0", 0, 4096, "",
	   "an MPI job: ranks launched beyond the program's, held in reserve past MPI_Init for "
	   "migrations (docs/coordinator.md, Spare ranks); the launcher's -np counts the program's")
CONFIG_KEY(STANDBY_WAIT,   "standby_wait",   UINT,   "120", 0, 86400, "",
	   "`stasis restart --standby`: seconds it waits for the job's stand-by to start and "
	   "have every rank past MPI_Init (a stand-by started just before it)")
CONFIG_KEY(HEARTBEAT_TIMEOUT, "heartbeat_timeout", UINT, "3000", 200, 600000, "",
	   "recover = auto: milliseconds of silence after which a node agent's node is lost "
	   "(the agents say ALIVE five times as often)")
CONFIG_KEY(RANK_TIMEOUT,   "rank_timeout",   UINT,   "600", 1, 86400, "",
	   "an MPI job's checkpoint: seconds the coordinator waits for a node agent's answer "
	   "for its ranks (stopped, written) before the checkpoint fails; the most a move into "
	   "spares waits for the source's agent to say it removed the job's directory")
CONFIG_KEY(MIGRATE_SHELL,  "migrate_shell",  STRING, "ssh", 0, 0, "",
	   "`stasis migrate`: the remote shell that starts the receiver on the target node "
	   "(as the MPI launchers start their daemons; docs/coordinator.md, Migration)")
CONFIG_KEY(MIGRATE_RATE,   "migrate_rate",   UINT,   "100", 1, 1000000, "",
	   "`stasis predict`: MiB/s a migration is expected to move before one was measured")
CONFIG_KEY(KEEP,           "keep",           UINT,   "0", 0, 1000000, "",
	   "checkpoints `stasis prune` keeps when --keep is not given (0: keep all)")
CONFIG_KEY(PREFETCH,       "prefetch",       CHOICE, "on", 0, 0, "on|off",
	   "`stasis restart` of an MPI job reads the files the job mapped and the rank images "
	   "ahead while the launcher starts (off: the ranks read them when they need them)")
CONFIG_KEY(STAGING,        "staging",        CHOICE, "off", 0, 0, "off|on",
	   "transparent MPI jobs write each rank's image into its node's local_dir and resume; "
	   "the ranks then copy them to the global tier at idle priority (docs/split.md, "
	   "\"Node-local staging\")")
CONFIG_KEY(STAGE_COPIES,   "stage_copies",   UINT,   "1", 1, 64, "",
	   "images a node copies to the global tier at once, per job (staging = on)")
CONFIG_KEY(STAGE_COMPRESS, "stage_compress", STRING, "off", 0, 0, "",
	   "with staging = on, the node agents compress the copies they make in the global tier: "
	   "off, zstd (level 1) or zstd:LEVEL (1-19); chunks that do not shrink stay as they are")
CONFIG_KEY(SPLIT_PROGRAMS, "split_programs", STRING, "python*", 0, 0, "",
	   "programs that load MPI only once they run (mpi4py's Python) and go above a lower "
	   "half as ranks of `stasis run -- mpirun ...` all the same: comma-separated shell "
	   "patterns of the executable's name (or path, with a slash); empty: none")
CONFIG_KEY(FILE_SAVE_MAX,  "file_save_max",  SIZE,   "256M", 0, 1ull << 40, "",
	   "a transparent checkpoint saves the contents of each regular file the program "
	   "has open for reading and writing up to this size, and a restart puts them back "
	   "(a file updated in place); a larger one fails the checkpoint; 0: never saved")
CONFIG_KEY(WRITTEN_SAVE_MAX, "written_save_max", SIZE, "16M", 0, 1ull << 40, "",
	   "the split process: each regular file the program wrote and closed is saved at a "
	   "checkpoint with its contents up to this size (a file it rewrites and reads back); "
	   "above it only its size and mtime, and a restart that finds it changed says so")
CONFIG_KEY(SPLIT_ONETLS,   "split_onetls",   CHOICE, "on", 0, 0, "off|on",
	   "the split process at `single` and `funneled`: a call into MPI keeps the program's "
	   "thread pointer and swaps two words of its thread block (the lower half's TLS below "
	   "it) instead of switching the FS base twice; falls back to two thread pointers, in "
	   "one line, where it cannot (docs/split.md, \"One thread pointer\")")
CONFIG_KEY(SOCKETS_OUTSIDE, "sockets_outside", CHOICE, "close", 0, 0, "close|refuse",
	   "a single process's connection to a peer outside it: close (a checkpoint takes it, a "
	   "restart gives it back reset, as after a network failure) or refuse (the checkpoint "
	   "fails naming it; docs/transparent.md, \"Sockets\")")
