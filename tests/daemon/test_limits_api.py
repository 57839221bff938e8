"""Limits a host could never honour are refused: `limits.cpus` over the CPUs cordond may run
on, or `limits.memory_mb` over the host's memory, are a 400 `invalid_field` naming the limit
and the host's maximum, with nothing made; the host's own maximum is accepted."""

import os

import pytest

from conftest import assert_error, requires_daemon

pytestmark = requires_daemon

API_MAX_CPUS = 64          # limits.cpus's range in the contract
API_MAX_MEMORY_MB = 65536  # limits.memory_mb's


def host_cpus():
    """What cordond sees: it inherits our affinity mask."""
    return len(os.sched_getaffinity(0))


def host_memory_mb():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    pytest.skip("no MemTotal in /proc/meminfo")


def live_ids(client):
    return sorted(s["id"] for s in client.list())


def refused(client, limits, field, host_max):
    before = live_ids(client)
    e = assert_error(client.post("/v1/sandboxes", {"limits": limits}), 400, "invalid_field")
    assert e["message"].startswith(field + ":"), e
    assert f"at most {host_max}," in e["message"] and "host" in e["message"], e
    assert live_ids(client) == before, "a refused create left a sandbox"
    assert client.get("/healthz").status == 200


@pytest.mark.any_runtime
def test_cpus_over_the_host_are_refused(client):
    n = host_cpus()
    if n + 1 > API_MAX_CPUS:
        pytest.skip(f"{n} CPUs: the contract's own maximum ({API_MAX_CPUS}) already bounds cpus")
    refused(client, {"cpus": n + 1}, "limits.cpus", n)
    refused(client, {"cpus": n + 0.5}, "limits.cpus", n)


@pytest.mark.any_runtime
def test_memory_over_the_host_is_refused(client):
    mb = host_memory_mb()
    if mb + 1 > API_MAX_MEMORY_MB:
        pytest.skip(f"{mb} MiB: the contract's own maximum ({API_MAX_MEMORY_MB}) already bounds memory_mb")
    refused(client, {"memory_mb": mb + 1}, "limits.memory_mb", mb)
    refused(client, {"memory_mb": min(API_MAX_MEMORY_MB, 2 * mb)}, "limits.memory_mb", mb)


@pytest.mark.any_runtime
def test_the_hosts_own_maximum_is_accepted(client, fresh):
    """The ceiling is the host's, not something lower: all its CPUs and all its memory (a
    limit, not a reservation) make a sandbox that runs."""
    n, mb = host_cpus(), min(host_memory_mb(), API_MAX_MEMORY_MB)
    sb = fresh(limits={"cpus": min(n, API_MAX_CPUS), "memory_mb": mb})
    assert sb["limits"]["cpus"] == min(n, API_MAX_CPUS) and sb["limits"]["memory_mb"] == mb, sb
    assert client.sh(sb["id"], "echo ok") == "ok\n"
