"""The daemon's layering, checked on its sources (docs/ARCHITECTURE.md, "The daemon").

The service files never see HTTP; sandbox.c calls nothing above it (its maker, the network,
processes and files reach it through hooks, listeners and the channel table); and no two of
the daemon's domain files call each other, so that a second API surface is a second route
table over the same service calls. Pure source checks: no daemon is started.
"""
import os
import re

import pytest

SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src", "daemon")

# No HTTP in these: the sandbox object, and the services, which take parsed arguments and
# answer through svc_reply / stream_sink.
SERVICES = ["sandbox.c", "proc.c", "files.c", "svc_sandbox.c", "svc_template.c", "create.c",
            "service.h", "svc_snapshot.c", "snapstore.c", "svc_code.c", "code.c", "approvals.c",
            "profiles.c"]
# What sandbox.c must not call: everything that uses a sandbox rather than being it.
ABOVE_SANDBOX = ["proc.c", "files.c", "v1.c", "create.c", "network.c", "svc_sandbox.c",
                 "svc_template.c", "http.c", "svc_snapshot.c", "svc_code.c", "code.c"]
DOMAIN = ["sandbox.c", "proc.c", "files.c", "v1.c", "create.c", "network.c", "svc_sandbox.c",
          "svc_template.c", "http.c", "svc_snapshot.c", "snapstore.c", "svc_code.c", "code.c",
          "approvals.c", "profiles.c"]
# Pairs allowed to call each other: none (the pool hears of template rebuilds through the
# callback it gives templates_watch()).
KNOWN_CYCLES = set()


def source(name):
    with open(os.path.join(SRC, name)) as f:
        text = f.read()
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def exported(name):
    """Names of the non-static functions defined in @name."""
    return set(re.findall(r"^(?!static)[a-z][\w \*]*?\b(\w+)\([^;]*?\)\s*\n\{", source(name), re.M))


def calls(caller, callee):
    body = source(caller)
    return sorted(f for f in exported(callee) if re.search(r"\b%s\(" % re.escape(f), body))


@pytest.mark.parametrize("name", SERVICES)
def test_services_see_no_http(name):
    body = source(name)
    for word in ("evhttp", "struct ctx", "reply_error(", "reply_json(", "reply_buf(", "req_on_close(",
                 "stream_start(", "stream_end("):
        assert word not in body, f"{name} uses {word!r}: a service answers through svc_reply"


@pytest.mark.parametrize("above", ABOVE_SANDBOX)
def test_sandbox_calls_nothing_above_it(above):
    assert calls("sandbox.c", above) == [], f"sandbox.c calls {above}: use a hook or a chan_ops"


def test_no_two_domain_files_call_each_other():
    cycles = []
    for i, a in enumerate(DOMAIN):
        for b in DOMAIN[i + 1:]:
            if frozenset({a, b}) in KNOWN_CYCLES:
                continue
            ab, ba = calls(a, b), calls(b, a)
            if ab and ba:
                cycles.append(f"{a} -> {b} {ab}, {b} -> {a} {ba}")
    assert not cycles, "\n".join(cycles)


def test_the_checks_see_functions():
    """The checks above would pass on anything if the parser found no functions."""
    assert {"sbx_send", "sbx_destroy", "sbx_chan_add"} <= exported("sandbox.c")
    assert {"svc_proc_start", "proc_spawn_template"} <= exported("proc.c")
    assert calls("v1.c", "proc.c")
    assert {"svc_template_build", "svc_template_delete", "templates_watch"} <= exported("svc_template.c")
    assert calls("v1.c", "svc_template.c")


def test_the_route_tables_hold_no_domain_logic():
    """Every route of v1.c calls a service or renders; none reaches the store or spawns."""
    body = source("v1.c")
    # Whole identifiers: v1_fork( is a route, fork( a process.
    for word in (r"\bstore_\w*\(", r"\bposix_spawn", r"\baudit_append\(", r"\bfork\(",
                 r"\bD\.daemon_audit"):
        found = re.search(word, body)
        assert not found, f"v1.c uses {found.group(0)!r}: that belongs behind a service function"



def function_lengths(name):
    """(lines, function) for each function defined in @name: from its '{' to its '}' at column 0."""
    lines, out, head, start = source(name).split("\n"), [], None, None
    for i, line in enumerate(lines):
        m = re.match(r"^(?:static )?[a-z][\w \*]*?\b(\w+)\(", line)
        if m and not line.rstrip().endswith(";") and start is None:
            head = m.group(1)
        elif line == "{" and head:
            start = i
        elif line == "}" and start is not None:
            out.append((i - start - 1, head))
            head = start = None
    return out


@pytest.mark.parametrize("name", ["create.c", "svc_sandbox.c", "svc_template.c", "code.c"])
def test_service_functions_are_short(name):
    """A service call reads as its steps (svc_sandbox_create: runtime, obtain, set up, record,
    answer), each a function of its own."""
    found = function_lengths(name)
    assert len(found) > 10, found  # the parser sees the file's functions
    long = [(n, f) for n, f in found if n > 50]
    assert not long, f"{name}: functions over 50 lines: {long}"
    assert name != "create.c" or dict((f, n) for n, f in found)["svc_sandbox_create"] <= 30


def test_the_surfaces_are_a_list():
    """http.c knows no surface by name: main.c hands it the list, a second surface is a row."""
    assert "v1_surface" not in source("http.c")
    assert re.search(r"surfaces\[\] = \{&v1_surface[,}]", source("main.c"))
    assert "render_error" in source("http.c")
