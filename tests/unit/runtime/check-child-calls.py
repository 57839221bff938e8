#!/usr/bin/python3
"""Every libc function the jail child can reach between clone() and exec() is on a list of
functions that take no lock and allocate nothing.

The child is cloned from a process that may have other threads (cordond's pool creator).
Whatever lock another thread held at that instant stays held in the child for ever, and
glibc keeps per-thread state (the setxid handshake of setuid() and friends waits for every
thread glibc knows of, threads the child does not have). One such call made cordond's
creates hang (issue 10: setresgid() waiting in setxid_mark_thread() for a thread that had
not started when the child was cloned). So the child calls the kernel, not libc's wrappers
that do more than a syscall.

This walks the machine code of a linked binary from jail_child_main: every direct call and
tail jump is followed through our own functions; each PLT call is a libc function that must
be on ALLOWED. An indirect call in the child's code fails the check too (it cannot be
followed). Usage: check-child-calls.py BINARY [ENTRY...]
"""

import bisect
import re
import subprocess
import sys

# Plain system call wrappers, string functions over caller memory, and fortify checks. Each
# takes no lock, allocates nothing and keeps no per-thread state of glibc's.
ALLOWED = {
    # system calls
    "syscall", "close", "read", "write", "send", "recvmsg", "open", "openat", "open64",
    "openat64", "fcntl", "fcntl64", "dup2", "dup3", "ioctl", "socket", "prctl", "unshare",
    "setsid", "sethostname", "mount", "umount2", "pivot_root", "mkdir", "rmdir", "chdir",
    "chmod", "chown", "symlink", "readlinkat", "fstat", "fstat64", "fstatat", "fstatat64",
    "lstat", "lstat64", "stat", "stat64", "fstatvfs", "fstatvfs64", "getrlimit", "setrlimit",
    "getrlimit64", "setrlimit64", "clock_gettime", "_exit",
    # memory and strings
    "memcpy", "memmove", "memset", "memcmp", "strlen", "strnlen", "strcmp", "strncmp",
    "strchr", "strchrnul", "strrchr", "strcspn", "strspn", "strcat", "strcpy",
    # glibc's snprintf writes into the caller's buffer through a string stream that has no
    # lock; it allocates only for a field width over ~1000 or for positional arguments
    # (%1$s), which no format in the child uses.
    "snprintf", "vsnprintf",
    # fortify (-D_FORTIFY_SOURCE) and stack-protector variants of the above
    "__snprintf_chk", "__vsnprintf_chk", "__memcpy_chk", "__memmove_chk", "__memset_chk",
    "__strcat_chk", "__strcpy_chk", "__strncpy_chk", "__stpcpy_chk", "__read_chk",
    "__readlinkat_chk", "__open64_2", "__openat64_2", "__open_2", "__openat_2",
    "__stack_chk_fail", "__errno_location",
    # glibc's table of English messages: no locale, no gettext, no lock (unlike strerror)
    "strerrordesc_np",
}

CALL = re.compile(r"\s(?:call|jmp|j[a-z]{1,3})\s+([0-9a-f]+) <([^>]+)>")
INDIRECT = re.compile(r"\s(?:call|jmp)\s+\*")
HEAD = re.compile(r"^([0-9a-f]+) <([^>]+)>:$")


def functions(binary):
    """Start address -> (name, lines). By address: two static functions may share a name."""
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", binary], check=True,
                         capture_output=True, text=True).stdout
    funcs, cur = {}, None
    for line in out.splitlines():
        m = HEAD.match(line)
        if m:
            cur = []
            funcs[int(m.group(1), 16)] = (m.group(2), cur)
            continue
        if cur is not None and line.strip():
            cur.append(line)
    return funcs


def walk(funcs, entry):
    starts = sorted(funcs)
    by_name = [a for a in starts if funcs[a][0] == entry]
    if len(by_name) != 1:
        raise SystemExit(f"check-child-calls: {len(by_name)} functions named {entry}")

    def containing(addr):
        return starts[bisect.bisect_right(starts, addr) - 1]

    seen, libc, indirect, todo = set(), {}, [], [by_name[0]]
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        name, lines = funcs[f]
        for line in lines:
            if INDIRECT.search(line):
                indirect.append(f"{name}: {line.strip()}")
            m = CALL.search(line)
            if not m:
                continue
            target = m.group(2).split("+")[0]
            if target.endswith("@plt"):
                libc.setdefault(target[:-4], set()).add(name)
            else:
                g = containing(int(m.group(1), 16))
                if g != f:
                    todo.append(g)
    return seen, libc, indirect


# Where the child starts: spawn.c's spawn_child() when it runs in the host's memory (x86_64),
# jail_child_main() in the copy; spawn_child() calls jail_child_main(), both are walked.
ENTRIES = ("spawn_child", "jail_child_main")


def main():
    binary = sys.argv[1]
    funcs = functions(binary)
    names = {name for name, _ in funcs.values()}
    entries = sys.argv[2:] or [e for e in ENTRIES if e in names]
    if "jail_child_main" not in entries and not sys.argv[2:]:
        raise SystemExit("check-child-calls: no jail_child_main in " + binary)
    failed = 0
    for entry in entries:
        seen, libc, indirect = walk(funcs, entry)
        bad = {name: callers for name, callers in libc.items() if name not in ALLOWED}
        print(f"{entry}: {len(seen)} functions of ours, libc: {' '.join(sorted(libc))}")
        for name, callers in sorted(bad.items()):
            print(f"NOT ALLOWED in the jail child: {name} (called from {', '.join(sorted(callers))})")
        for line in indirect:
            print(f"INDIRECT call in the jail child (cannot be checked): {line}")
        failed |= bool(bad or indirect)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
