/* Starting the jail's child in our own memory, as posix_spawn() starts one.
 *
 * A fork-like clone() copies the caller's page tables and marks every writable page
 * copy-on-write in both processes. In cordond, with the state of every sandbox alive in its
 * memory, that copy was the part of a build that grew with the number alive, and its loop
 * then paid copy-on-write faults (and the TLB shootdowns they bring) for each page it wrote
 * until the child had exec'd (bench/RESULTS.md, goal 5). So the child runs in our memory
 * (CLONE_VM) on a stack of its own until it execs. Its code is what it was in the copy
 * (child.c): system calls and its own memory only, nothing of libc that locks, allocates or
 * keeps per-thread state; it writes no memory but its own stack.
 *
 * Without CLONE_SETTLS the child runs on the thread-local storage (errno among it) of the
 * thread that cloned it, so that thread must write none of it until the child has exec'd or
 * died. posix_spawn() has the kernel hold it (CLONE_VFORK); here it holds itself, because it
 * must first tell the builder that the child exists, whatever the child does: a child
 * stopped before its first instruction would otherwise hold the builder too. So a spawner
 * thread clones, wakes the builder, then waits with raw system calls (no errno) on the
 * child's CLONE_CHILD_CLEARTID word, which the kernel clears, with a futex wake, when the
 * child execs or exits. It does this for one child at a time and lives as long as the
 * process: a child's parent-death signal fires when the thread that cloned it exits, and a
 * sandbox must not die with a thread. A build takes an idle spawner or makes another (a
 * stopped child holds its spawner until the host kills it, and no other build may wait for
 * that), hands it a request on a pipe and waits on a futex; the kernel has written the
 * child's pid and pidfd (CLONE_PARENT_SETTID, CLONE_PIDFD) by the time clone3() returns.
 *
 * x86_64 only (the clone3 trampoline and the raw calls below are per architecture);
 * elsewhere, in a build with AddressSanitizer, or if clone3() is missing, jail_spawn() says
 * -ENOSYS and the caller clones a copy as before.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/futex.h>
#include <linux/sched.h>

#include "runtime/jail/jail.h"

/* The child's stack: the deepest path (rootfs setup, with PATH_MAX buffers) uses tens of
 * KiB; pages never touched cost nothing. Below it, a guard page. */
#define SPAWN_STACK (512u << 10)
#define SPAWN_GUARD 4096u

#define STR_(x) #x
#define STR(x) STR_(x)

struct spawn_req {
	struct jail_child *c;
	struct clone_args args;
	pid_t pid;     /* CLONE_PARENT_SETTID: written before the child runs */
	int pidfd;     /* CLONE_PIDFD: likewise */
	int err;       /* -errno of clone3(), or 0 */
	bool into_cgroup;
	_Atomic int state; /* futex: 0 until clone3() has returned */
	_Atomic int ctid;  /* CLONE_CHILD_CLEARTID: 1, then 0 once the child has exec'd or died */
	_Atomic int refs;  /* the builder's and the spawner's */
};

struct spawner {
	int req_fd[2];
	void *stack; /* one child at a time */
	atomic_bool busy; /* from its taking (spawner_take()) until its child has exec'd or died */
};

/* Spawners are never freed: a child's parent-death signal is its spawner thread's. A child
 * that stalls before its exec holds its spawner until the host kills it (cordond's setup
 * deadline), so a build never waits for another's spawner: it takes an idle one or makes
 * one, up to this many (then the copy). */
#define SPAWNERS_MAX 64

/* AddressSanitizer keeps the stack bounds of each thread it knows of, and a child on a stack
 * it was not told of makes its no-return handling give up with a warning and leave stale
 * poison behind ("false positive error reports may follow"): sanitized builds clone a copy. */
#if defined(__SANITIZE_ADDRESS__)
#define SPAWN_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SPAWN_SANITIZED 1
#endif
#endif

#if defined(__x86_64__) && !defined(SPAWN_SANITIZED)
/* long spawn_clone3(struct clone_args *args, size_t size, int (*fn)(void *), void *arg):
 * clone3(args, size); the child, on args->stack, calls fn(arg) and exits with its value.
 * The kernel keeps every register but rax, rcx and r11 across the call, so fn and arg ride
 * in r9 and r8; the child's stack pointer is the top of its stack (16-byte aligned: the
 * call's return address then leaves fn's frame as the ABI expects). Returns the child's pid
 * or -errno, as the kernel does. */
long spawn_clone3(struct clone_args *args, size_t size, int (*fn)(void *), void *arg);
__asm__(".pushsection .text\n"
	".type spawn_clone3, @function\n"
	".hidden spawn_clone3\n"
	".globl spawn_clone3\n"
	"spawn_clone3:\n"
	"	mov %rcx, %r8\n"
	"	mov %rdx, %r9\n"
	"	mov $" STR(__NR_clone3) ", %eax\n"
	"	syscall\n"
	"	test %rax, %rax\n"
	"	jnz 1f\n"
	"	xor %ebp, %ebp\n"
	"	mov %r8, %rdi\n"
	"	call *%r9\n"
	"	mov %eax, %edi\n"
	"	mov $" STR(__NR_exit) ", %eax\n"
	"	syscall\n"
	"	hlt\n"
	"1:	ret\n"
	".size spawn_clone3, .-spawn_clone3\n"
	".popsection\n");
#define HAVE_TRAMPOLINE 1
#else
#define HAVE_TRAMPOLINE 0
#endif

#if HAVE_TRAMPOLINE
static atomic_bool clone3_missing;
static pthread_mutex_t spawners_lock = PTHREAD_MUTEX_INITIALIZER;
static struct spawner *spawners[SPAWNERS_MAX];
static size_t n_spawners;

static void req_put(struct spawn_req *req)
{
	if (atomic_fetch_sub(&req->refs, 1) == 1)
		free(req);
}

/* A system call that leaves errno alone: the spawner's, while its child runs on its TLS. */
static long raw_futex(_Atomic int *word, long op, long val)
{
	long ret;
	register long r10 __asm__("r10") = 0; /* no timeout */
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"((long)SYS_futex), "D"(word), "S"(op), "d"(val), "r"(r10)
			 : "rcx", "r11", "memory");
	return ret;
}

static void req_wake(struct spawn_req *req)
{
	atomic_store_explicit(&req->state, 1, memory_order_release);
	raw_futex(&req->state, FUTEX_WAKE_PRIVATE, 1);
}

static void req_wait(struct spawn_req *req)
{
	while (atomic_load_explicit(&req->state, memory_order_acquire) == 0)
		raw_futex(&req->state, FUTEX_WAIT_PRIVATE, 0);
}

/* Until the child has exec'd or died. The kernel's wake for CLONE_CHILD_CLEARTID is a
 * shared futex's, so the wait is too. */
static void wait_exec(struct spawn_req *req)
{
	int v;
	while ((v = atomic_load_explicit(&req->ctid, memory_order_acquire)) != 0)
		raw_futex(&req->ctid, FUTEX_WAIT, v);
}

static int spawn_child(void *arg)
{
	struct spawn_req *req = arg;
	jail_child_main(req->c); /* never returns */
}

static long clone_once(struct spawner *sp, struct spawn_req *req)
{
	req->into_cgroup = req->args.flags & CLONE_INTO_CGROUP;
	req->args.stack = (uint64_t)(uintptr_t)sp->stack + SPAWN_GUARD;
	req->args.stack_size = SPAWN_STACK;
	return spawn_clone3(&req->args, sizeof(req->args), spawn_child, req);
}

/* Whether SIGCHLD has a handler of the host's, which must not run on the child's stack. */
static bool sigchld_handled(void)
{
	struct sigaction sa;
	return sigaction(SIGCHLD, NULL, &sa) == 0 &&
	       ((sa.sa_flags & SA_SIGINFO) || (sa.sa_handler != SIG_DFL && sa.sa_handler != SIG_IGN));
}

/* One child: cloned, the builder told, then its exec (or death) waited for. */
static void spawn_one(struct spawner *sp, struct spawn_req *req)
{
	sigset_t chld;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	bool block = sigchld_handled();
	if (block)
		pthread_sigmask(SIG_BLOCK, &chld, NULL);
	long r = clone_once(sp, req);
	if ((r == -E2BIG || r == -EINVAL) && (req->args.flags & CLONE_INTO_CGROUP)) {
		req->args.flags &= ~(uint64_t)CLONE_INTO_CGROUP; /* before 5.7: the host moves it */
		req->args.cgroup = 0;
		r = clone_once(sp, req);
	}
	/* After a failure @c is the builder's again, and it may free it once woken. */
	struct jail_child *c = r > 0 ? req->c : NULL;
	if (r < 0)
		req->err = (int)r;
	req_wake(req);
	if (r > 0)
		wait_exec(req); /* nothing of ours written before: the child runs on our TLS */
	if (block)
		pthread_sigmask(SIG_UNBLOCK, &chld, NULL);
	req_put(req);
	jail_child_free(c);
	atomic_store_explicit(&sp->busy, false, memory_order_release);
}

static void *spawner_main(void *arg)
{
	struct spawner *sp = arg;
	struct spawn_req *req;
	while (read(sp->req_fd[0], &req, sizeof(req)) == sizeof(req))
		spawn_one(sp, req);
	return NULL;
}

/* A new spawner; NULL if one cannot be made. Its thread has every signal blocked but
 * SIGCHLD (the child inherits the mask and resets it itself), so that no handler of the
 * host's runs on the child's stack and a signalfd of the host's still sees what it asked for. SIGCHLD stays as it was, for the child's death is signalled
 * to the thread that cloned it: blocked there, and not ignored, it would be queued to the
 * process and interrupt another thread's system call (cordond's loop had a cgroup limit's
 * write answered EINTR under load). A SIGCHLD the default ignores does nothing in the child
 * either; one with a handler is blocked while the child runs (spawn_one()). */
static struct spawner *spawner_new(void)
{
	struct spawner *sp = calloc(1, sizeof(*sp));
	if (!sp)
		return NULL;
	sp->stack = mmap(NULL, SPAWN_GUARD + SPAWN_STACK, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK | MAP_NORESERVE, -1, 0);
	if (sp->stack == MAP_FAILED || mprotect(sp->stack, SPAWN_GUARD, PROT_NONE) < 0 ||
	    pipe2(sp->req_fd, O_CLOEXEC) < 0) {
		if (sp->stack != MAP_FAILED)
			munmap(sp->stack, SPAWN_GUARD + SPAWN_STACK);
		free(sp);
		return NULL;
	}
	sigset_t all, old;
	pthread_sigmask(SIG_SETMASK, NULL, &old);
	sigfillset(&all);
	if (!sigismember(&old, SIGCHLD))
		sigdelset(&all, SIGCHLD);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_t t;
	int r = pthread_create(&t, NULL, spawner_main, sp);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r != 0) {
		close(sp->req_fd[0]);
		close(sp->req_fd[1]);
		munmap(sp->stack, SPAWN_GUARD + SPAWN_STACK);
		free(sp);
		return NULL;
	}
	pthread_setname_np(t, "cordon-spawn");
	pthread_detach(t);
	return sp;
}

/* A process forked from ours has none of our threads: its spawners, copies of ours, have
 * nobody to read their requests but our own spawner threads, which would read a pointer into
 * the child's memory in ours. The child starts with none (its copies and their pipes let
 * go), and makes its own if it builds. */
static void fork_prepare(void)
{
	pthread_mutex_lock(&spawners_lock);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&spawners_lock);
}

static void fork_child(void)
{
	for (size_t i = 0; i < n_spawners; i++) {
		close(spawners[i]->req_fd[0]);
		close(spawners[i]->req_fd[1]);
		spawners[i] = NULL;
	}
	n_spawners = 0;
	pthread_mutex_unlock(&spawners_lock);
}

static void atfork_once(void)
{
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* An idle spawner, now busy; NULL when there is none and no more can be made. */
static struct spawner *spawner_take(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	struct spawner *sp = NULL;
	pthread_once(&once, atfork_once);
	pthread_mutex_lock(&spawners_lock);
	for (size_t i = 0; i < n_spawners && !sp; i++)
		if (!atomic_load_explicit(&spawners[i]->busy, memory_order_acquire))
			sp = spawners[i];
	if (!sp && n_spawners < SPAWNERS_MAX && (sp = spawner_new()))
		spawners[n_spawners++] = sp;
	if (sp)
		atomic_store(&sp->busy, true);
	pthread_mutex_unlock(&spawners_lock);
	return sp;
}

pid_t jail_spawn(struct jail_child *c, uint64_t flags, int cgroup_fd, int *ret_pidfd,
		 bool *ret_into_cgroup)
{
	if (atomic_load(&clone3_missing))
		return -ENOSYS;
	struct spawn_req *req = calloc(1, sizeof(*req));
	struct spawner *sp = req ? spawner_take() : NULL;
	if (!sp) {
		free(req);
		return -ENOSYS; /* the copy still works, and costs only time */
	}
	req->c = c;
	req->pidfd = -1;
	atomic_init(&req->refs, 2);
	atomic_init(&req->ctid, 1);
	req->args = (struct clone_args){
		.flags = flags | CLONE_VM | CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID |
			 (cgroup_fd >= 0 ? CLONE_INTO_CGROUP : 0),
		.pidfd = (uint64_t)(uintptr_t)&req->pidfd,
		.parent_tid = (uint64_t)(uintptr_t)&req->pid,
		.child_tid = (uint64_t)(uintptr_t)&req->ctid,
		.exit_signal = SIGCHLD, /* what exec makes it anyway */
		.cgroup = cgroup_fd >= 0 ? (uint64_t)cgroup_fd : 0,
	};
	if (write(sp->req_fd[1], &req, sizeof(req)) != sizeof(req)) {
		atomic_store(&sp->busy, false);
		free(req);
		return -ENOSYS;
	}
	req_wait(req);
	pid_t r = req->err ? req->err : req->pid;
	if (req->err == -ENOSYS)
		atomic_store(&clone3_missing, true);
	if (r > 0) {
		*ret_pidfd = req->pidfd;
		*ret_into_cgroup = req->into_cgroup;
	}
	req_put(req);
	return r;
}
#else
pid_t jail_spawn(struct jail_child *c, uint64_t flags, int cgroup_fd, int *ret_pidfd,
		 bool *ret_into_cgroup)
{
	return -ENOSYS;
}
#endif
