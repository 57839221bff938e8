#include <signal.h>
#include <sys/signalfd.h>

#include "basic/sigfd.h"

int sigfd_block(const int *sigs, size_t n)
{
	sigset_t mask;
	sigemptyset(&mask);
	for (size_t i = 0; i < n; i++)
		sigaddset(&mask, sigs[i]);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	return signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
}
