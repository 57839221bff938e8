"""DNS from a sandbox: every DNS packet goes to cordon-egress's filter, whatever server it was
addressed to, and only names the policy allows are forwarded to the host's resolver. The fake
DNS servers log every query they receive, so the far side proves it."""

import secrets

from conftest import DNS_IP, HOST_IP, ROGUE_DNS, WEB1, WEB2

REFUSED = 5


def test_sandbox_dns_never_reaches_a_server_directly(net):
    m = net.mark()
    tun = f"x{secrets.token_hex(6)}.evil.test"  # what a DNS tunnel would leak
    dgram = f"udp-{secrets.token_hex(6)}"
    _, res = net.probe(["--allow", "api.example.test"], [
        {"op": "dns", "server": DNS_IP, "name": tun},                       # 0
        {"op": "dns", "server": DNS_IP, "name": tun, "tcp": True},          # 1
        {"op": "dns", "server": ROGUE_DNS, "name": tun},                    # 2
        {"op": "dns", "server": ROGUE_DNS, "name": tun, "tcp": True},       # 3
        {"op": "dns", "server": WEB1, "name": tun},                         # 4: no DNS server there
        {"op": "dns", "server": ROGUE_DNS, "name": "api.example.test"},     # 5
        {"op": "dns", "server": DNS_IP, "name": "api.example.test", "tcp": True},  # 6
        {"op": "udp", "connect": WEB1, "port": 7, "data": dgram},           # 7: not DNS: dropped
        {"op": "resolve", "name": "api.example.test"},                      # 8
    ])
    for i in range(5):
        r = res[i]
        assert r.get("answered") and r["rcode"] == REFUSED, \
            f"a query for a forbidden name to {r['op']['server']} ({'tcp' if r['op'].get('tcp') else 'udp'}) " \
            f"should be REFUSED by the filter: {r}"
    for i in (5, 6):
        r = res[i]
        assert r.get("answered") and r["rcode"] == 0 and r["addrs"] == [WEB2], \
            f"an allowed name should be answered through the filter: {r}"
    assert res[8]["ok"] and res[8]["addrs"] == [WEB2], res[8]

    seen = net.seen(m)
    assert not [r for r in seen if r.get("qname") and tun in r["qname"]], \
        f"the forbidden name reached a DNS server: {[r for r in seen if r.get('qname')]}"
    assert not [r for r in seen if r.get("data") == dgram], "a non-DNS UDP datagram left the sandbox"
    dns = [r for r in seen if r["kind"] == "dns"]
    assert dns, "the allowed name was never forwarded to the host's resolver"
    rogue = [r for r in dns if r["server"].startswith(ROGUE_DNS + ":")]
    assert not rogue, f"the rogue resolver got queries; only the host's resolver may: {rogue}"
    bad = [r for r in dns if r["peer"] != HOST_IP or r["qname"] != "api.example.test"]
    assert not bad, f"queries other than the proxy's forwarded allowed ones: {bad}"


def test_dns_filter_answers_nothing_in_an_address_only_policy(net):
    m = net.mark()
    _, res = net.probe(["--allow", f"{WEB1}:22"], [
        {"op": "dns", "server": DNS_IP, "name": "api.example.test"},
        {"op": "resolve", "name": "evil.test"},
    ])
    assert not (res[0].get("answered") and res[0]["rcode"] == 0 and res[0]["addrs"]), \
        f"a name was resolved under an address-only policy: {res[0]}"
    assert not res[1]["ok"], res[1]
    assert not [r for r in net.seen(m) if r["kind"] == "dns"], "a query reached the host's resolver"


def test_oversized_tcp_message_after_a_query_is_dropped_safely(net):
    """A TCP DNS client that sends an allowed query and then a message over the filter's
    buffer is disconnected; the upstream answer to its query, arriving after, must not be
    written to the closed connection (it was: a use after free in cordon-egress, which ASan
    shows; run with CORDON_EGRESS=<asan build>/cordon-egress). The filter keeps answering."""
    _, res = net.probe(["--allow", "api.example.test"], [
        {"op": "dns_tcp_oversize", "server": DNS_IP, "name": "api.example.test", "size": 8192},
        {"op": "dns", "server": DNS_IP, "name": "api.example.test"},
        {"op": "dns", "server": DNS_IP, "name": "api.example.test", "tcp": True},
    ])
    assert res[0]["closed"], f"the filter did not close the connection: {res[0]}"
    for r in res[1:]:
        assert r.get("answered") and r["rcode"] == 0 and r["addrs"] == [WEB2], \
            f"the DNS filter stopped answering after the oversized message: {r}"


def test_tcp_dns_connections_count_toward_the_connection_limit(net, monkeypatch):
    """DNS over TCP holds a connection in the proxy like any other: a sandbox cannot open
    more of them than its connection limit (it could, without bound, and so use up the
    proxy's file descriptors for every sandbox). Once they close, DNS works again."""
    monkeypatch.setenv("CORDON_EGRESS_LIMITS", "4,200,16777216")
    _, res = net.probe(["--allow", "api.example.test"], [
        {"op": "dns_tcp_hold", "server": DNS_IP, "name": "api.example.test", "n": 12},
        {"op": "dns", "server": DNS_IP, "name": "api.example.test", "tcp": True},
    ])
    assert 1 <= res[0]["answered"] <= 4, \
        f"{res[0]['answered']} of 12 TCP DNS connections held at once were served under a limit of 4: {res[0]}"
    assert res[1].get("answered") and res[1]["addrs"] == [WEB2], \
        f"DNS over TCP did not work again once the held connections closed: {res[1]}"


def test_tcp_client_that_never_reads_its_answers_is_throttled(net, monkeypatch):
    """Answers queued for a TCP client that does not read them are bounded: the filter stops
    reading its queries (TCP backpressure) instead of queueing answers without limit (it
    did: 8 MB of refused queries went into the proxy's memory as 8 MB of answers)."""
    monkeypatch.setenv("CORDON_EGRESS_LIMITS", "256,10000000,16777216")
    _, res = net.probe(["--allow", "api.example.test"], [
        {"op": "dns_tcp_noread", "server": DNS_IP, "name": "x.evil.test", "n": 250000, "wait": 6},
        {"op": "dns", "server": DNS_IP, "name": "api.example.test", "tcp": True},
    ])
    assert res[0]["blocked"], f"8 MB of queries whose answers were never read were all taken in: {res[0]}"
    assert res[1].get("answered") and res[1]["addrs"] == [WEB2], \
        f"the filter stopped answering other clients: {res[1]}"
