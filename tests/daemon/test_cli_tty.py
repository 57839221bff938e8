"""The CLI's terminals and tunnels: `cordon exec -t`, `cordon run -t` (the caller's terminal
raw while the command has it, its size and TERM passed on, SIGWINCH as a resize, restored on
the way out) and `cordon port-forward` (a local port to one inside, through cordond)."""

import fcntl
import http.client
import os
import pty
import select
import signal
import socket
import struct
import subprocess
import termios
import time

import pytest

from conftest import daemon_fixture, CORDON, TEST_RUNTIME, requires_daemon, wait_foreground

pytestmark = requires_daemon


daemon = daemon_fixture(pool=0, max_sandboxes=4, max_timeout=600)


def set_size(fd, rows, cols):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


class OnTerminal:
    """argv run on a fresh pty of ours (as a person's terminal would be)."""

    def __init__(self, argv, env=None, rows=33, cols=111):
        self.master, slave = pty.openpty()
        set_size(slave, rows, cols)
        self.before = termios.tcgetattr(slave)
        self.slave = slave
        self.p = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave,
                                  env={**os.environ, "TERM": "xterm-test", **(env or {})},
                                  start_new_session=True,
                                  preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
        self.out = b""
        self.seen = 0

    def expect(self, needle, timeout=20):
        """Reads until @needle shows after the last match."""
        deadline = time.monotonic() + timeout
        while needle.encode() not in self.out[self.seen:]:
            left = deadline - time.monotonic()
            assert left > 0, f"{needle!r} not seen: {self.out[-1500:]!r}"
            r, _, _ = select.select([self.master], [], [], left)
            if r:
                try:
                    self.out += os.read(self.master, 65536)
                except OSError:
                    break
        i = self.out.find(needle.encode(), self.seen)
        assert i >= 0, self.out[-1500:]
        self.seen = i + len(needle)

    def send(self, data):
        os.write(self.master, data.encode())

    def finish(self, timeout=20):
        try:
            rc = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            raise
        after = termios.tcgetattr(self.slave)
        os.close(self.slave)
        os.close(self.master)
        return rc, after


def check_session(t, resize_signal, tty_name=True, ctrl_c=True, foreground=None):
    t.expect("PROMPT$ ")
    t.send("tty; test -t 0 && echo IS-A-TTY; echo TERM=$TERM; stty size\r")
    # exec -t: the sandbox's own devpts; run -t: a PTY of the host's, which the sandbox's
    # /dev/pts cannot name (tty says "not a tty", isatty() is true)
    t.expect("/dev/pts/" if tty_name else "IS-A-TTY")
    t.expect("TERM=xterm-test")
    t.expect("33 111")
    set_size(t.slave, 40, 120)
    resize_signal()
    time.sleep(0.8)
    t.send("stty size\r")
    t.expect("40 120")
    if ctrl_c:
        t.send("sleep 100\r")
        t.expect("sleep 100")
        if foreground:
            foreground("sleep 100")  # it has the terminal: Ctrl-C is its
        else:
            time.sleep(2)  # a one-shot run has no daemon to look with
        t.send("\x03")  # Ctrl-C, a byte in raw mode, SIGINT from the remote terminal
        t.expect("PROMPT$ ")
    t.send("exit 7\r")


def test_exec_t(daemon, client, sandbox):
    t = OnTerminal([CORDON, "--socket", daemon.sock, "exec", "-t", "-e", "PS1=PROMPT$ ",
                    sandbox["id"], "--", "bash", "--norc", "--noprofile", "-i"])
    # runsc: Ctrl-C through the PTY is flaky there (test_pty.py says more)
    check_session(t, lambda: t.p.send_signal(signal.SIGWINCH), ctrl_c=TEST_RUNTIME != "gvisor",
                  foreground=lambda cmd: wait_foreground(client, sandbox["id"], cmd))
    rc, after = t.finish()
    assert rc == 7, t.out[-1000:]
    assert after == t.before, "the terminal was not restored"


def test_run_t(daemon):
    if os.geteuid() != 0:
        pytest.skip("cordon run's jail needs root here")
    t = OnTerminal([CORDON, "run", "-t", "-e", "PS1=PROMPT$ ", "--", "bash", "--norc",
                    "--noprofile", "-i"])
    check_session(t, lambda: t.p.send_signal(signal.SIGWINCH), tty_name=False)
    rc, after = t.finish()
    assert rc == 7, t.out[-1000:]
    assert after == t.before, "the terminal was not restored"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_port_forward(daemon, client, sandbox):
    sid = sandbox["id"]
    client.sh(sid, "mkdir -p /tmp/pf && echo forwarded-ok > /tmp/pf/x.txt")
    srv = client.start_process(sid, argv=["python3", "-m", "http.server", "8123", "--bind",
                                          "127.0.0.1", "--directory", "/tmp/pf"], timeout_s=0)
    lport = free_port()
    fwd = subprocess.Popen([CORDON, "--socket", daemon.sock, "port-forward", sid, "8123",
                            "--listen", f"127.0.0.1:{lport}"], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                c = http.client.HTTPConnection("127.0.0.1", lport, timeout=10)
                c.request("GET", "/x.txt")
                r = c.getresponse()
                body = r.read()
                c.close()
                if r.status == 200:
                    break
            except (OSError, http.client.HTTPException):
                pass
            assert time.monotonic() < deadline, "nothing answered through the forward"
            time.sleep(0.3)
        assert body == b"forwarded-ok\n"
        # several at once
        for _ in range(5):
            c = http.client.HTTPConnection("127.0.0.1", lport, timeout=10)
            c.request("GET", "/x.txt")
            assert c.getresponse().read() == b"forwarded-ok\n"
            c.close()
    finally:
        fwd.send_signal(signal.SIGINT)
        rc = fwd.wait(10)
        client.post(f"/v1/sandboxes/{sid}/processes/{srv.pid}/signal", {"signal": "KILL"})
        srv.close()
    assert rc == 0, fwd.stderr.read()


def test_port_forward_refusals(daemon, sandbox):
    p = subprocess.run([CORDON, "--socket", daemon.sock, "port-forward", sandbox["id"], "0"],
                       capture_output=True, timeout=10)
    assert p.returncode == 2 and b"PORT" in p.stderr


def test_run_t_is_the_jails():
    """Only the jail hands a one-shot command a terminal: -t elsewhere is a usage error, not a
    command that finds no terminal."""
    p = subprocess.run([CORDON, "run", "--runtime", "gvisor", "-t", "--", "true"],
                       capture_output=True, timeout=30)
    assert p.returncode == 2 and b"jail" in p.stderr, p.stderr
