/* Real programs under the jail's seccomp filter, so that an over-tight policy is caught
 * here rather than in an integration test: fork, no_new_privs, seccomp_apply(sandbox filter), execve,
 * and expect exit status 0. A program that is not installed is skipped. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

/* cmocka.h needs setjmp.h, stdarg.h and stddef.h first. */
#include <cmocka.h>

#include "basic/cleanup.h"
#include "lib/seccomp.h"
#include "policy/seccomp_filter.h"

#define PY_WORKLOAD                                                                                \
	"import os, socket, subprocess, sys, tempfile, threading, multiprocessing as mp\n"         \
	"t = threading.Thread(target=lambda: None); t.start(); t.join()\n"                         \
	"assert subprocess.run(['/bin/sh', '-c', 'exit 3']).returncode == 3\n"                     \
	"with mp.Pool(2) as p: assert p.map(abs, [-1, -2]) == [1, 2]\n"                            \
	"a, b = socket.socketpair(); a.send(b'x'); assert b.recv(1) == b'x'\n"                     \
	"s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); s.close()\n"                       \
	"with tempfile.TemporaryDirectory() as d: open(os.path.join(d, 'f'), 'w').write('x')\n"

#define CC_WORKLOAD                                                                                \
	"d=$(mktemp -d) && printf 'int main(void){return 0;}\\n' > $d/t.c && "                     \
	"cc -O2 -pthread -o $d/t $d/t.c && $d/t; r=$?; rm -rf $d; exit $r"

struct program {
	const char *name;
	const char *const argv[8];
};

static const struct program programs[] = {
    {"sh true", {"/bin/sh", "-c", "true"}},
    {"python3 pass", {"/usr/bin/python3", "-c", "pass"}},
    {"coreutils pipeline",
     {"/bin/sh", "-c",
      "ls -la / | sort | wc -l > /dev/null && "
      "cat /etc/passwd | head -1 >/dev/null && "
      "date >/dev/null && id >/dev/null"}},
    {"python3 threads, subprocess, multiprocessing", {"/usr/bin/python3", "-c", PY_WORKLOAD}},
    {"python3 venv",
     {"/bin/sh", "-c",
      "d=$(mktemp -d) && /usr/bin/python3 -m venv "
      "--without-pip $d/v && $d/v/bin/python -c pass; "
      "r=$?; rm -rf $d; exit $r"}},
    {"cc", {"/usr/bin/cc", "--version"}},
    {"cc compile and run", {"/bin/sh", "-c", CC_WORKLOAD}},
    {"make", {"/usr/bin/make", "--version"}},
    {"git",
     {"/bin/sh", "-c",
      "d=$(mktemp -d) && git init -q $d && git -C $d status "
      ">/dev/null; r=$?; rm -rf $d; exit $r"}},
    {"node", {"/usr/bin/node", "-e", "require('child_process').execSync('true')"}},
};

static _noreturn_ void child(const struct program *p)
{
	extern char **environ;

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || seccomp_apply(cordon_seccomp_sandbox.filter, cordon_seccomp_sandbox.len) < 0)
		_exit(126);
	execve(p->argv[0], (char *const *)p->argv, environ);
	_exit(127);
}

/* Some workloads run a second program through sh (git, cc): skip if it is missing. */
static bool installed(const struct program *p)
{
	static const char *const needs[][2] = {
	    {"git", "/usr/bin/git"},
	    {"cc compile and run", "/usr/bin/cc"},
	    {"python3 venv", "/usr/bin/python3"},
	};

	for (size_t i = 0; i < ELEMENTSOF(needs); i++)
		if (strcmp(p->name, needs[i][0]) == 0 && access(needs[i][1], X_OK) < 0)
			return false;
	return access(p->argv[0], X_OK) == 0;
}

static void test_program(void **state)
{
	const struct program *p = *state;
	int status;
	pid_t pid;

	if (!installed(p)) {
		print_message("skip %s: not installed\n", p->name);
		skip();
	}
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		child(p);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (WIFSIGNALED(status))
		fail_msg("%s: killed by signal %d", p->name, WTERMSIG(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void)
{
	struct CMUnitTest tests[ELEMENTSOF(programs)];

	for (size_t i = 0; i < ELEMENTSOF(programs); i++)
		tests[i] = (struct CMUnitTest){.name = programs[i].name,
					       .test_func = test_program,
					       .initial_state = (void *)&programs[i]};
	return _cmocka_run_group_tests("seccomp-exec", tests, ELEMENTSOF(tests), NULL, NULL);
}
