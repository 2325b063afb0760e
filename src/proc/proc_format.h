/* proc_format.h - records shared by the injected agent, the coordinator side
 * of proc/ and the freestanding restorer.
 *
 * Three programs read and write these structures: libstasis-inject.so (inside
 * the checkpointed program, no Stasis libraries), the `stasis` coordinator
 * (writes and reads images) and stasis-restore (no libc at all). So this
 * header holds only fixed-size integer records and constants; it includes
 * nothing but <stdint.h>.
 *
 * Two byte streams use them, both framed by struct proc_msg:
 *   dump stream    agent -> coordinator over the job's channel socket;
 *   restore stream coordinator -> restorer over a pipe.
 * The "process" section of an image stores the same records (see
 * docs/transparent.md, "Image sections for processes").
 */
#ifndef STASIS_PROC_FORMAT_H
#define STASIS_PROC_FORMAT_H

#include <stdint.h>

#include "../pimg/pimg_format.h"

/* 2: PROC_FD_EXTERNAL and struct proc_fd's origin, the nice value in the
 * header (version 1 images, which have neither, are still read).
 * 3: process trees: the agent follows fork (CHILD), parks before it dumps
 * (PARKED, then DUMP); an agent of version 1 or 2 dumps on CHECKPOINT */
#define PROC_FORMAT_VERSION 3
#define PROC_MSG_MAGIC      0x50535453u   /* "STSP" */
#define PROC_PAGE_SIZE      4096u

/* The real-time signal that stops threads for a checkpoint. glibc keeps 32
 * and 33 for itself; programs rarely use the top of the range. */
#define PROC_CKPT_SIGNAL    62

/* Stasis's window: the restorer's text, data, stacks and scratch memory and
 * the agent's checkpoint-time buffers live here and nowhere else, so a
 * restored program never has an image region in it and the agent skips it
 * (buffers outside it would merge with a neighbouring program mapping). 0x3ff0'0000'0000 (64 TiB)
 * is far below the top-down mmap area and far above any brk heap. */
#define PROC_WINDOW_START   0x3ff000000000ull
#define PROC_WINDOW_END     0x3ff200000000ull
#define PROC_RESTORER_TEXT  0x3ff000000000ull   /* link address (-Ttext-segment) */
#define PROC_WINDOW_AGENT   0x3ff040000000ull   /* the agent's scratch during a checkpoint */
#define PROC_WINDOW_SCRATCH 0x3ff100000000ull   /* restorer: stacks, tables, moved vdso */

/* Environment variable naming the channel descriptor given to the agent. */
#define PROC_ENV_FD         "STASIS_COORD_FD"
/* Set by the agent for the program it execs: the descriptors inherited at
 * launch ("fd:dev:ino,..."), so the new program's agent knows them too. */
#define PROC_ENV_LAUNCH_FDS "STASIS_LAUNCH_FDS"
/* Set by the agent for a child it starts with posix_spawn: the new
 * program's agent says HELLO (a new process), though it came by an exec. */
#define PROC_ENV_SPAWNED    "STASIS_SPAWNED"
/* The agent keeps its channel at or above this descriptor number. */
#define PROC_AGENT_FD_MIN   900
/* The memfd of the tree's list of written files (sts_written.h), which the
 * coordinator makes: its number in the environment; kept by the agent at
 * PROC_AGENT_FD_MIN or above, and saved as an external descriptor of this
 * launch number, which `stasis restart` holds its new one at. */
#define PROC_ENV_WRITTEN    "STASIS_WRITTEN_FD"
#define PROC_WRITTEN_ORIGIN 899
/* ... a file of the job's directory: a restart reads what the run before
 * appended since the checkpoint (the files it made) */
#define PROC_WRITTEN_LOG_FILE "written.log"

enum proc_msg_type {
	/* dump stream (agent -> coordinator) */
	PROC_MSG_HELLO = 1,     /* payload: struct proc_hello */
	PROC_MSG_HEADER,        /* struct proc_header, then cwd (header.cwd_len bytes) */
	PROC_MSG_SIGACTS,       /* struct proc_sigaction[PROC_NSIG] */
	PROC_MSG_THREAD,        /* struct proc_thread, then uc_size bytes of ucontext + xsave */
	PROC_MSG_REGION,        /* struct proc_region, then path (path_len bytes) */
	PROC_MSG_PAGES,         /* struct proc_pages, then npages * 4096 bytes */
	PROC_MSG_END,           /* empty: the dump is complete */
	PROC_MSG_ERROR,         /* text: the checkpoint cannot be taken; the program runs on */
	PROC_MSG_RESTARTED,     /* struct proc_hello: agent is alive after a restart */
	PROC_MSG_FD,            /* struct proc_fd, then path (path_len), then data (data_len) */
	PROC_MSG_CHILD,         /* empty, with SCM_RIGHTS: the coordinator's end of the channel
				 * of a child this process is forking (version 3) */
	PROC_MSG_PARKED,        /* struct proc_parked, then nkids struct proc_kid: every thread
				 * is parked; the agent waits for DUMP, RESUME or EXIT */
	PROC_MSG_WRITTEN,       /* struct proc_written_list, then n NUL-terminated paths: the
				 * files the program opened for writing (after the FDs) */
	/* commands (coordinator -> agent) */
	PROC_CMD_CHECKPOINT = 32, /* empty */
	PROC_CMD_RESUME,        /* empty: the image is durable (or failed); run on */
	PROC_CMD_EXIT,          /* empty: end the program (checkpoint --stop) */
	PROC_CMD_DUMP,          /* empty: every process of the tree is parked; stream the dump */
	/* restore stream (coordinator -> restorer), after HEADER/SIGACTS/REGION* */
	PROC_MSG_DATA = 64,     /* struct proc_data, then len bytes for that address */
	PROC_MSG_THREADS_DONE,  /* every THREAD record was sent */
	PROC_MSG_KEEP_FDS,      /* struct proc_keep_fd[]: the program's descriptors, set up
				 * before the restorer ran; every other one is closed */
	PROC_MSG_IMAGE,         /* the image's name (NUL-terminated), for messages: CHUNK
				 * records that follow are read from the image descriptor */
	PROC_MSG_CHUNK,         /* struct proc_chunk, then npieces struct proc_data, then
				 * the section's name (name_len bytes, with its NUL) */
	PROC_MSG_POPULATE,      /* struct proc_data[]: large runs of anonymous memory that
				 * DATA and CHUNK records will fill, in their order; the
				 * restorer populates them ahead of the fill on a helper thread */
	PROC_MSG_HELPER_TID,    /* int32_t: the tid the helper thread takes, one that no
				 * thread of any process of the tree has (they restore at
				 * once in one PID namespace); without it, the lowest that
				 * none of this process's threads has */
};
/* Restore stream order: HEADER, SIGACTS, REGION*, THREAD*, THREADS_DONE,
 * [HELPER_TID], POPULATE, IMAGE, (DATA | CHUNK)*, KEEP_FDS. */

struct proc_msg {
	uint32_t magic;
	uint32_t type;
	uint64_t len;           /* payload bytes that follow */
};

struct proc_hello {
	uint32_t version;
	int32_t pid;            /* as the program sees it */
	uint64_t state_addr;    /* struct proc_agent_state in the program */
};

/* The files the program opened for writing (src/split/upper/uh_files.c's list),
 * which the coordinator saves where the program has closed them
 * (src/proc/written.c); dropped: opens for writing since the last
 * checkpoint that found the list full. */
struct proc_written_list {
	uint32_t n;
	uint32_t dropped;
};

/* What a parked process says of itself and its children (version 3). */
struct proc_parked {
	int32_t pid, ppid, pgid, sid;   /* as the program sees them */
	uint32_t nkids;
	uint32_t pad;
};

struct proc_kid {
	int32_t pid;
	uint32_t zombie;            /* ended, not yet waited for */
	int32_t status;             /* a zombie's wait status (/proc/<pid>/stat exit_code) */
	char comm[20];
};

/* Written by the restorer into the restored program before any thread runs. */
#define PROC_STATE_MAGIC 0x5354415349535354ull
struct proc_agent_state {
	uint64_t magic;
	volatile int32_t restarts;   /* incremented by every restore */
	int32_t channel_fd;          /* where the restorer put the new channel */
};

enum proc_region_kind {
	PROC_REGION_ANON = PIMG_ANON,       /* private anonymous (and [heap], [stack], deleted files) */
	PROC_REGION_FILE_PRIVATE = PIMG_FILE_PRIVATE,   /* private file mapping: file + written pages */
	PROC_REGION_FILE_SHARED = PIMG_FILE_SHARED,    /* shared file mapping: re-mapped from the file */
	PROC_REGION_SHARED_ANON = PIMG_SHARED_ANON,    /* shared anonymous / memfd / SysV: all pages stored */
};

enum proc_region_flag {
	PROC_RF_HEAP      = PIMG_F_HEAP,
	PROC_RF_STACK     = PIMG_F_STACK,  /* the main stack: restored MAP_GROWSDOWN */
	PROC_RF_DELETED   = PIMG_F_DELETED,  /* backed by a deleted file: saved as memory */
	PROC_RF_SHM_FD    = 1u << 3,  /* restore stream only: shared memory of a process tree,
				       * mapped from the descriptor in file_size */
};

/* struct proc_region and proc_pages: the process image's records
 * (pimg_format.h); the dump stream carries them too. */
#define proc_region pimg_rec_region
#define proc_pages  pimg_rec_run

/* A byte range to fill (restore stream). */
struct proc_data {
	uint64_t addr;
	uint64_t len;
};

/* A raw chunk of the image that the restorer reads itself (restore stream):
 * its len payload bytes at file_offset of the image descriptor go, in order,
 * to the pieces that follow (their lengths add up to len), and their CRC-32C
 * must be crc before the program may run. section, index, header_pos and the
 * name only serve the message naming a bad chunk. */
struct proc_chunk {
	uint64_t file_offset;       /* of the payload */
	uint64_t header_pos;        /* of the chunk's header */
	uint64_t len;
	uint32_t crc;
	uint32_t section;           /* index in the image */
	uint32_t index;             /* chunk number in the section */
	uint32_t npieces;
	uint32_t name_len;
	uint32_t pad;
};

#define proc_thread pimg_rec_thread   /* pimg_format.h */
#define PROC_THREAD_MAIN  PIMG_THREAD_MAIN
#define PROC_THREAD_AGENT PIMG_THREAD_AGENT
/* A THREAD record in a stream: the record, then uc_size bytes of
 * ucontext + xsave area (a copy for inspection). */

enum proc_fd_kind {
	PROC_FD_FILE = 1,       /* regular file: reopened by path at its offset */
	PROC_FD_UNLINKED,       /* regular file deleted while open: content in data */
	PROC_FD_DIR,            /* directory: reopened by path */
	PROC_FD_CHAR,           /* character device (/dev/null, a tty, ...): reopened by path */
	PROC_FD_PIPE_READ,      /* read end of a pipe whose ends are all in the process;
				 * the first one of a pipe carries its buffered data */
	PROC_FD_PIPE_WRITE,
	PROC_FD_STDIO,          /* 0, 1, 2: taken over from `stasis restart` */
	PROC_FD_EVENTFD,        /* data: its /proc/self/fdinfo text (count, semaphore) */
	PROC_FD_TIMERFD,        /* data: fdinfo text (clock, it_value, it_interval) */
	PROC_FD_EPOLL,          /* data: fdinfo text (one tfd/events/data line per watch) */
	PROC_FD_EXTERNAL,       /* a pipe, socket or terminal the program inherited at launch
				 * (docs/transparent.md): at a restart, the descriptor
				 * `stasis restart` inherited at number origin, else /dev/null */
	PROC_FD_SIGNALFD,       /* data: fdinfo text (sigmask) */
	PROC_FD_INOTIFY,        /* data: fdinfo text (one "inotify wd:" line per watch), then
				 * one "watch:\t<wd hex> <path>" line per watch (fd_inotify.c) */
	PROC_FD_SOCKET,         /* a UNIX or TCP stream socket; data: struct proc_socket, then
				 * its unread bytes (fd_socket.c) */
	PROC_FD_PTY,            /* a pseudo-terminal master, or a slave whose master is in the
				 * process; data: struct proc_pty, then a master's unread
				 * bytes (fd_pty.c) */
	PROC_FD_FILE_SAVED,     /* regular file open for reading and writing: data is its
				 * contents at the checkpoint (size bytes), then its "lock:"
				 * lines; a restart puts the contents back (fd_file.c) */
};

/* A pseudo-terminal end: its settings, and a master's unread bytes. */
struct proc_pty {
	uint32_t master;            /* 1: /dev/ptmx; 0: the slave /dev/pts/<index> */
	uint32_t index;             /* the pty's number (TIOCGPTN) at the checkpoint */
	uint32_t locked;            /* a master's TIOCGPTLCK */
	uint16_t winsize_rows, winsize_cols, winsize_x, winsize_y;   /* TIOCGWINSZ */
	uint8_t termios[64];        /* the slave's struct termios (glibc's, tcgetattr) */
	uint64_t queued;            /* a master's bytes that follow: what its slave wrote */
};

enum proc_sock_state {
	PROC_SOCK_UNCONNECTED = 1,  /* made, maybe bound, not connected */
	PROC_SOCK_LISTEN,
	PROC_SOCK_CONNECTED,
};

/* What a socket is: its addresses, its peer, its receive queue's length. */
struct proc_socket {
	uint32_t family, type, protocol, state;   /* state: enum proc_sock_state */
	uint64_t peer_ino;          /* AF_UNIX: the peer's inode (sock_diag); 0 when none */
	uint32_t outside;           /* connected to a peer that is not in the process */
	uint32_t reuseaddr;         /* SO_REUSEADDR */
	uint32_t local_len, peer_len;
	uint8_t local[128], peer[128];  /* struct sockaddr_storage */
	uint32_t backlog;           /* a listening socket's */
	uint32_t pad;
	uint64_t queued;            /* bytes of the receive queue that follow */
};

struct proc_fd {
	int32_t fd;
	uint32_t kind;              /* enum proc_fd_kind */
	uint32_t flags;             /* F_GETFL */
	uint32_t cloexec;
	uint64_t offset;            /* lseek(fd, 0, SEEK_CUR); a connected socket: this end's
				     * identity (a UNIX socket's inode, a hash of a TCP
				     * socket's local and peer address) */
	uint64_t size;              /* regular files: size at the checkpoint; a connected
				     * socket: its peer's identity (tree.c finds peers in
				     * other processes by it) */
	uint64_t ino, dev;          /* pipes: ino identifies the pipe */
	uint32_t mode;              /* st_mode */
	uint32_t pipe_size;         /* F_GETPIPE_SZ */
	uint32_t path_len;          /* bytes of path that follow, with its NUL */
	int32_t origin;             /* PROC_FD_EXTERNAL: its number at launch; else 0 */
	uint64_t data_len;          /* bytes of data after the path; a regular file's is its
				     * "lock:" lines of fdinfo (fd_file.c), if it has any; a
				     * saved one's, its contents then those lines */
};

struct proc_keep_fd {
	int32_t fd;
	uint32_t cloexec;
};

#define PROC_NSIG PIMG_NSIG
#define proc_sigaction pimg_rec_sigaction   /* pimg_format.h */

#define proc_header pimg_rec_header   /* pimg_format.h; version: PROC_FORMAT_VERSION */

#endif
