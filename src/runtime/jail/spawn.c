/* Starting the jail's child in our own memory, as posix_spawn() starts one.
 *
 * A fork-like clone() copies the caller's page tables and marks every writable page
 * copy-on-write in both processes. In cordond, with the state of every sandbox alive in its
 * memory, that copy was the part of a build that grew with the number alive, and its loop
 * then paid copy-on-write faults (and the TLB shootdowns they bring) for each page it wrote
 * until the child had exec'd (bench/RESULTS.md, goal 5). So the child runs in our memory
 * (CLONE_VM) on a stack of its own, and the thread that cloned it sleeps in the kernel until
 * the child has exec'd or died (CLONE_VFORK): the child runs on that thread's thread-local
 * storage (errno), which must not be in use by two at once. The child's code is what it was
 * in the copy (child.c): system calls and its own memory only, nothing of libc that locks,
 * allocates or keeps per-thread state; it also writes no memory but its own stack.
 *
 * The thread that clones cannot be the builder's: the child waits for the host's "go",
 * which the builder sends after clone() has returned, and CLONE_VFORK holds the cloning
 * thread until exec. So each thread that builds has a spawner thread of its own, made at its
 * first build, that lives as long as the process: a child's parent-death signal fires when
 * the thread that cloned it exits, and a sandbox must not die with a thread. The builder
 * hands it a request on a pipe and waits on a futex until the child runs; the kernel has
 * written the child's pid and pidfd (CLONE_PARENT_SETTID, CLONE_PIDFD) before that.
 *
 * x86_64 only (the clone3 trampoline below is per architecture); elsewhere, or if clone3()
 * is missing, jail_spawn() says -ENOSYS and the caller clones a copy as before.
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
	_Atomic int state; /* futex: 0 until the child runs or clone3() has failed */
	_Atomic int refs;  /* the builder's and the spawner's */
};

struct spawner {
	int req_fd[2];
	void *stack; /* one child at a time */
};

#if defined(__x86_64__)
/* long spawn_clone3(struct clone_args *args, size_t size, int (*fn)(void *), void *arg):
 * clone3(args, size); the child, on args->stack, calls fn(arg) and exits with its value.
 * The kernel keeps every register but rax, rcx and r11 across the call, so fn and arg ride
 * in r9 and r8; the child's stack pointer is the top of its stack (16-byte aligned: the
 * call's return address then leaves fn's frame as the ABI expects). Returns the child's pid
 * or -errno, as the kernel does. */
long spawn_clone3(struct clone_args *args, size_t size, int (*fn)(void *), void *arg);
__asm__(".text\n"
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
	".size spawn_clone3, .-spawn_clone3\n");
#define HAVE_TRAMPOLINE 1
#else
#define HAVE_TRAMPOLINE 0
#endif

static atomic_bool clone3_missing;
static _Thread_local struct spawner *mine;

static void req_put(struct spawn_req *req)
{
	if (atomic_fetch_sub(&req->refs, 1) == 1)
		free(req);
}

/* The raw futex calls: no errno is written on success, and the child may make this one. */
static void req_wake(struct spawn_req *req)
{
	atomic_store_explicit(&req->state, 1, memory_order_release);
	syscall(SYS_futex, &req->state, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void req_wait(struct spawn_req *req)
{
	while (atomic_load_explicit(&req->state, memory_order_acquire) == 0)
		syscall(SYS_futex, &req->state, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
}

/* The child's first steps: tell the builder it runs (its pid is written by now). */
static int spawn_child(void *arg)
{
	struct spawn_req *req = arg;
	struct jail_child *c = req->c;
	req_wake(req);
	jail_child_main(c); /* never returns */
}

#if HAVE_TRAMPOLINE
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

/* One child: cloned, then (CLONE_VFORK) back here once it has exec'd or died. */
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
	if (block)
		pthread_sigmask(SIG_UNBLOCK, &chld, NULL);
	/* After a failure @c is the builder's again, and it may free it once woken. */
	struct jail_child *c = r > 0 ? req->c : NULL;
	if (r < 0)
		req->err = (int)r;
	if (atomic_load_explicit(&req->state, memory_order_acquire) == 0)
		req_wake(req); /* clone3() failed, or the child died before its first step */
	req_put(req);
	jail_child_free(c);
}
#endif

static void *spawner_main(void *arg)
{
	struct spawner *sp = arg;
	struct spawn_req *req;
	while (read(sp->req_fd[0], &req, sizeof(req)) == sizeof(req)) {
#if HAVE_TRAMPOLINE
		spawn_one(sp, req);
#endif
	}
	return NULL;
}

/* This thread's spawner, made at its first build; NULL if one cannot be made. Its thread
 * has every signal blocked but SIGCHLD (the child inherits the mask and resets it itself),
 * so that no handler of the host's runs on the child's stack and a signalfd of the host's
 * still sees what it asked for. SIGCHLD stays as it was, for the child's death is signalled
 * to the thread that cloned it: blocked there, and not ignored, it would be queued to the
 * process and interrupt another thread's system call (cordond's loop had a cgroup limit's
 * write answered EINTR under load). A SIGCHLD the default ignores does nothing in the child
 * either; one with a handler is blocked while the child runs (spawn_one()). */
static struct spawner *spawner_get(void)
{
	if (mine)
		return mine;
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
	return mine = sp;
}

pid_t jail_spawn(struct jail_child *c, uint64_t flags, int cgroup_fd, int *ret_pidfd,
		 bool *ret_into_cgroup)
{
	if (!HAVE_TRAMPOLINE || atomic_load(&clone3_missing))
		return -ENOSYS;
	struct spawner *sp = spawner_get();
	struct spawn_req *req = sp ? calloc(1, sizeof(*req)) : NULL;
	if (!req)
		return -ENOSYS; /* the copy still works, and costs only time */
	req->c = c;
	req->pidfd = -1;
	atomic_init(&req->refs, 2);
	req->args = (struct clone_args){
		.flags = flags | CLONE_VM | CLONE_VFORK | CLONE_PARENT_SETTID |
			 (cgroup_fd >= 0 ? CLONE_INTO_CGROUP : 0),
		.pidfd = (uint64_t)(uintptr_t)&req->pidfd,
		.parent_tid = (uint64_t)(uintptr_t)&req->pid,
		.exit_signal = SIGCHLD, /* what exec makes it anyway */
		.cgroup = cgroup_fd >= 0 ? (uint64_t)cgroup_fd : 0,
	};
	if (write(sp->req_fd[1], &req, sizeof(req)) != sizeof(req)) {
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
