/* What the agent's files share (agent.c: the loop, processes, files; agent-watch.c: directory
 * watches; agent-port.c: port connections): the agent's state and its output queue. Not a
 * module's interface: the agent's own insides, split by concern. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "basic/buf.h"
#include "lib/frame.h"
#include "init/watch.h"

#define OUT_SOFT         (256u * 1024u) /* stop producing output above this */
#define PIPE_CHUNK       (64u * 1024u)
#define FILE_CHUNK       (128u * 1024u)
#define STDIN_QUEUE_MAX  (2u * FRAME_MAX_PAYLOAD) /* per process */
#define MAX_PROCS        FRAME_MAX_PROCS
#define MAX_READS        16u
#define LIST_MAX_ENTRIES 10000u
#define LIST_MAX_BYTES   FRAME_MAX_PAYLOAD
#define REMOVE_MAX_DEPTH 256
#define DEFAULT_PATH     "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

struct proc {
	struct proc *next;
	uint32_t chan;
	pid_t pid;
	int out_fd, err_fd, in_fd;
	int pty_fd;         /* the PTY's master (out_fd and in_fd are its dups), or -1 */
	struct buf inq;
	bool in_close;      /* STDIN_CLOSE seen: close in_fd once inq is written */
	bool exited;        /* reaped; status is valid, pid must not be signalled any more */
	bool timed_out;
	bool paused;        /* PAUSE: its pipes are not read (while it runs) */
	int status;
	uint64_t deadline;  /* CLOCK_MONOTONIC ms, 0 = none */
};

struct fread_job {
	uint32_t chan;
	int fd;
	uint64_t off, left, sent;
	int status_fd; /* ARCHIVE_READ: the packer child's verdict; -1 for a file */
};

/* An ARCHIVE_WRITE in progress: its chunks go into the unpacker child's pipe. */
struct awrite_job {
	uint32_t chan;
	int fd, status_fd; /* -1 once closed: at END, or when the child stopped reading */
	int err;	   /* the child's verdict (a positive errno), or why it did not start */
	struct buf q;	   /* the chunk not yet in the pipe */
	uint32_t q_size;   /* its size, for its OK */
	bool pending;	   /* a chunk not answered yet */
	bool end;	   /* it is the END chunk */
};
#define MAX_WRITES 4u

/* A WATCH_OPEN's inotify, read as its user (it adds watches on new directories). */
struct awatch {
	uint32_t chan;
	uint32_t user;
	struct watch *w;
};
#define MAX_WATCHES 16u

/* A PORT_OPEN's TCP connection to 127.0.0.1:PORT, relayed on its channel. */
struct aport {
	struct aport *next;
	uint32_t chan;
	int fd;
	bool connecting; /* connect() in progress: OK or ERROR when it is done */
	bool rd_eof;     /* PORT_EOF sent: nothing more is read */
	bool paused;     /* PAUSE: not read while the host's reader is behind */
	struct buf q;    /* PORT_WRITE bytes not yet written */
	uint64_t written; /* in all, acknowledged by OK{SIZE} */
};
#define MAX_PORTS     64u
#define PORT_QUEUE_MAX (2u * FRAME_MAX_PAYLOAD) /* the host keeps 1 MiB in flight at most */

union small_msg {
	struct frame_hello hello;
	struct frame_data data;
	struct frame_signal sig;
	struct frame_file file;
	struct frame_winsize winsize;
	struct frame_port port;
};

struct agent {
	int fd;
	int sigfd;
	bool host_gone;
	bool fatal;
	uid_t uid;
	gid_t gid;
	struct buf out;
	struct proc *procs;
	unsigned n_procs;
	struct fread_job reads[MAX_READS];
	unsigned n_reads;
	struct awrite_job writes[MAX_WRITES];
	unsigned n_writes;
	struct awatch watches[MAX_WATCHES];
	unsigned n_watches;
	struct aport *ports;
	unsigned n_ports;
	struct frame_decoder *dec;
	struct frame_spawn *spawn;
	union small_msg msg;
};

struct slot {
	struct proc *p;
	int which; /* 0 out, 1 err, 2 in */
	struct aport *port;
};

/* ---- agent.c ---- */

void close_fd(int *fd);
int set_nonblock(int fd);
/* Queues a frame towards the host; running out of memory is fatal (a->fatal). */
void emit(struct agent *a, uint16_t type, uint32_t chan, const void *msg);
void emit_error(struct agent *a, uint32_t chan, int err, const char *what);
/* One read of @fd (at @off unless -1) into the queue as a @type frame: bytes, 0 at EOF, -errno. */
ssize_t emit_from_fd(struct agent *a, uint16_t type, uint32_t chan, int fd, size_t max, off_t off);
/* Whether the queue towards the host has room (below OUT_SOFT): else produce nothing. */
bool out_room(const struct agent *a);
/* openat2(RESOLVE_NO_MAGICLINKS), or openat(O_NOFOLLOW) without it. */
int xopenat(int dirfd, const char *path, int flags, mode_t mode);
int check_path(const char *path);
/* File work as @user (fsuid, or euid where the fsuid does not take), and back. */
int fs_become(const struct agent *a, uint32_t user);
void fs_restore(const struct agent *a);

/* ---- agent-watch.c ---- */

int do_watch_open(struct agent *a, uint32_t chan, void *m);
int do_watch_close(struct agent *a, uint32_t chan, void *m);
void watch_drop(struct agent *a, struct awatch *aw);
void pump_watches(struct agent *a);

/* ---- agent-port.c ---- */

struct aport *port_find(struct agent *a, uint32_t chan);
void port_free(struct agent *a, struct aport *p);
int do_port_open(struct agent *a, uint32_t chan, void *m);
int do_port_write(struct agent *a, uint32_t chan, void *m);
int do_port_close(struct agent *a, uint32_t chan, void *m);
/* The poll events its socket wants now (0: none), and what to do when they come. */
short port_events(const struct agent *a, const struct aport *p);
void port_event(struct agent *a, struct aport *p, short revents);
