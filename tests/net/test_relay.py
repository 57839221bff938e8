"""The relay once a connection is allowed: it carries bytes both ways for as long as both ends
keep the connection, however quiet the sandbox is between two messages."""

from conftest import WEB2, token

# The proxy gives a sandbox 10 s (SNIFF_TIMEOUT_S in src/net/egress) to name the destination;
# a relayed connection must not inherit that deadline.
IDLE_S = 11


def test_relay_reads_the_sandbox_after_an_idle_spell(net):
    """A name-checked connection (HTTP Host to an echo port) that is quiet for longer than the
    time allowed for the first bytes still relays what the sandbox sends next."""
    _, res = net.probe(["--allow", "api.example.test:22"], [
        {"op": "echo_idle", "connect": WEB2, "port": 22, "host": "api.example.test",
         "idle": IDLE_S, "data": token("idle")},
    ])
    r = res[0]
    assert r.get("echo0"), f"the connection was not relayed at all: {r}"
    assert r["reached"], f"after {IDLE_S} s of silence the relay stopped reading the sandbox: {r}"
