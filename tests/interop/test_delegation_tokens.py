"""Delegation tokens (KIP-48) with Kafka's own tools and clients.

Tokens are created, described, renewed and expired with `kafka-delegation-tokens`
(org.apache.kafka.tools.DelegationTokenCommand, the Java AdminClient underneath), and used by
the Java client the way Spark and Flink jobs use them: SASL/SCRAM with the token id as user
name, the token's HMAC as password and `tokenauth="true"` in the JAAS config. The client then
produces and consumes as the token's owner. Each refusal is Kafka's: token requests over
PLAINTEXT or over a token-authenticated connection, an unknown HMAC, a principal that is
neither owner nor renewer, and tokens on a broker without `delegation.token.secret.key`. An
expired token stops authenticating (expired at once, or removed by the periodic check), and a
token survives a broker restart.

The brokers are configured with Kafka's settings, so the same properties start the reference
Kafka (STRATA_TEST_TARGET=kafka): a PLAINTEXT listener (to create topics and SCRAM users) and
a SASL_PLAINTEXT listener with SCRAM-SHA-256/512.
"""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass

import pytest
from confluent_kafka.admin import (ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)

from conftest import free_port
from helpers import admin, create_topic
from java_apps import JVM_OPTS, _java_bin, classpath

SECRET = "strata-delegation-token-secret"
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
USERS = {"alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret"}

TOOLS_CP, TOOLS_SKIP = classpath("tools")
CLIENTS_CP, CLIENTS_SKIP = classpath("clients")

# One row of kafka-delegation-tokens' table: id, HMAC (base64 of 64 bytes), owner,
# requester, [renewers], then dates.
ROW = re.compile(r"^(\S+)\s+([A-Za-z0-9+/]{86}==)\s+(\S+)\s+(\S+)\s+\[([^\]]*)\]", re.M)


@dataclass
class TokenBroker:
    broker: object
    sasl_port: int

    @property
    def plaintext(self) -> str:
        return self.broker.bootstrap

    @property
    def sasl(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"


def _start(factory, **extra) -> TokenBroker:
    b = factory(start=False)
    sasl_port = free_port()
    listeners = f"PLAINTEXT://127.0.0.1:{b.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}"
    props = {
        "listeners": listeners,
        "advertised.listeners": listeners,
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": SCRAM_JAAS,
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
    }
    props.update(extra)
    b.props.update(props)
    b.start()
    t = TokenBroker(b, sasl_port)
    a = admin(t.plaintext)
    for user, password in USERS.items():
        for m in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
            up = UserScramCredentialUpsertion(user, ScramCredentialInfo(m, 4096), password.encode())
            for f in a.alter_user_scram_credentials([up]).values():
                f.result(timeout=30)
    _wait_for_login(t, "alice")
    return t


def _wait_for_login(t: TokenBroker, user: str) -> None:
    """The credentials reach the SASL server through the metadata log: wait for them."""
    deadline = time.monotonic() + 30
    while True:
        md = admin(t.sasl, **{"security.protocol": "SASL_PLAINTEXT",
                              "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": user,
                              "sasl.password": USERS[user]})
        try:
            if md.list_topics(timeout=5).brokers:
                return
        except Exception:  # noqa: BLE001 - not yet
            pass
        assert time.monotonic() < deadline, f"SCRAM user {user} never worked"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def tokens(module_broker_factory) -> TokenBroker:
    # A short expiry check so the periodic removal is observable.
    return _start(module_broker_factory, **{
        "delegation.token.secret.key": SECRET,
        "delegation.token.expiry.check.interval.ms": "1000",
    })


# --------------------------------------------------------------------------- tools

def _user_jaas(user: str) -> str:
    return (f'org.apache.kafka.common.security.scram.ScramLoginModule required '
            f'username="{user}" password="{USERS[user]}";')


def _token_jaas(token_id: str, hmac: str) -> str:
    return (f'org.apache.kafka.common.security.scram.ScramLoginModule required '
            f'username="{token_id}" password="{hmac}" tokenauth="true";')


def _client_props(jaas: str | None, mechanism="SCRAM-SHA-256") -> dict:
    if jaas is None:
        return {}
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
            "sasl.jaas.config": jaas}


@dataclass
class ToolRun:
    rc: int
    out: str
    err: str


def tool(bootstrap: str, jaas: str | None, tmp_path, *args, timeout=90) -> ToolRun:
    """kafka-delegation-tokens with a --command-config for `jaas` (None: PLAINTEXT)."""
    if TOOLS_CP is None:
        pytest.skip(f"kafka-delegation-tokens: {TOOLS_SKIP}")
    cfg = tmp_path / f"client-{time.monotonic_ns()}.properties"
    cfg.write_text("".join(f"{k}={v}\n" for k, v in _client_props(jaas).items()))
    cmd = [_java_bin(), *JVM_OPTS, "-cp", TOOLS_CP,
           "org.apache.kafka.tools.DelegationTokenCommand",
           "--bootstrap-server", bootstrap, "--command-config", str(cfg), *map(str, args)]
    cp = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return ToolRun(cp.returncode, cp.stdout, cp.stderr)


@dataclass
class Token:
    token_id: str
    hmac: str
    owner: str
    requester: str
    renewers: str


def rows(out: str) -> list[Token]:
    return [Token(*m.groups()) for m in ROW.finditer(out)]


def create(t: TokenBroker, tmp_path, user="alice", *args) -> Token:
    r = tool(t.sasl, _user_jaas(user), tmp_path, "--create", "--max-life-time-period", -1, *args)
    got = rows(r.out)
    assert r.rc == 0 and len(got) == 1, f"create failed: {r.out}\n{r.err[-2000:]}"
    return got[0]


def describe(t: TokenBroker, tmp_path, user="alice", owner="User:alice") -> list[Token]:
    r = tool(t.sasl, _user_jaas(user), tmp_path, "--describe", "--owner-principal", owner)
    assert r.rc == 0, r.err[-2000:]
    return rows(r.out)


def refused(r: ToolRun, exception: str) -> bool:
    return exception in r.out + r.err


def java_client(bootstrap: str, command: str, jaas: str | None, *args,
                mechanism="SCRAM-SHA-256", timeout=120) -> tuple[list[dict], str]:
    """InteropClient `command` authenticated with `jaas`; (JSON lines, stderr)."""
    if CLIENTS_CP is None:
        pytest.skip(f"Java interop client: {CLIENTS_SKIP}")
    import json
    conf = []
    for k, v in _client_props(jaas, mechanism).items():
        conf += ["--config", f"{k}={v}"]
    cmd = [_java_bin(), *JVM_OPTS, "-cp", CLIENTS_CP, "io.strata.interop.InteropClient",
           command, "--bootstrap", bootstrap, *map(str, args), *conf]
    cp = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    lines = [json.loads(x) for x in cp.stdout.splitlines() if x.startswith("{")]
    return lines, cp.stderr


def produce_and_consume(t: TokenBroker, token: Token, topic: str, n=3,
                        mechanism="SCRAM-SHA-256") -> tuple[list, list, list]:
    """(values produced, values consumed, errors) for a client authenticated with `token`."""
    jaas = _token_jaas(token.token_id, token.hmac)
    out, _ = java_client(t.sasl, "produce", jaas, "--topic", topic, "--count", n,
                         "--partition", 0, "--value-prefix", "t", "--timeout-ms", 20000,
                         mechanism=mechanism)
    produced = [f"t{x['index']}" for x in out if "offset" in x]
    errors = [x["error"] for x in out if "error" in x]
    consumed = []
    if produced:
        out, _ = java_client(t.sasl, "consume", jaas, "--topic", topic, "--count", n,
                             "--partition", 0, "--timeout-ms", 20000, mechanism=mechanism)
        consumed = [x["value"] for x in out if "offset" in x]
        errors += [x["error"] for x in out if "error" in x]
    return produced, consumed, errors


def token_login_refused(t: TokenBroker, token: Token, topic: str) -> list[str]:
    jaas = _token_jaas(token.token_id, token.hmac)
    out, err = java_client(t.sasl, "produce", jaas, "--topic", topic, "--count", 1,
                           "--partition", 0, "--timeout-ms", 10000)
    assert not [x for x in out if "offset" in x], "an expired token still produced"
    return [x["error"] for x in out if "error" in x] or [err[-2000:]]


NOT_ALLOWED = "UnsupportedByAuthenticationException"  # DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
SCRAM_REFUSED = "SaslAuthenticationException"


# --------------------------------------------------------------------------- scenarios

def test_token_requests_over_plaintext_are_not_allowed(tokens, tmp_path):
    r = tool(tokens.plaintext, None, tmp_path, "--create", "--max-life-time-period", -1)
    assert r.rc != 0 and refused(r, NOT_ALLOWED), r.err[-2000:]
    r = tool(tokens.plaintext, None, tmp_path, "--describe", "--owner-principal", "User:alice")
    assert r.rc != 0 and refused(r, NOT_ALLOWED), r.err[-2000:]


def test_a_token_authenticates_its_owner_and_is_renewed_described_and_expired(
        tokens, tmp_path, topic_name):
    create_topic(tokens.plaintext, topic_name)
    token = create(tokens, tmp_path, "alice", "--renewer-principal", "User:bob")
    assert (token.owner, token.requester, token.renewers) == ("User:alice", "User:alice",
                                                              "User:bob")

    # The token logs in (both SCRAM mechanisms) as its owner, who may use the topic.
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        produced, consumed, errors = produce_and_consume(tokens, token, topic_name,
                                                         mechanism=mechanism)
        assert produced == ["t0", "t1", "t2"], errors
        assert consumed[:3] == ["t0", "t1", "t2"], errors

    # Owner, requester and renewers see it; an owners filter of someone else does not.
    assert [x.token_id for x in describe(tokens, tmp_path, "alice")] == [token.token_id]
    assert [x.hmac for x in describe(tokens, tmp_path, "bob")] == [token.hmac]
    assert describe(tokens, tmp_path, "alice", owner="User:carol") == []

    # A connection authenticated with a token may not manage tokens.
    jaas = _token_jaas(token.token_id, token.hmac)
    r = tool(tokens.sasl, jaas, tmp_path, "--create", "--max-life-time-period", -1)
    assert r.rc != 0 and refused(r, NOT_ALLOWED), r.out + r.err[-2000:]

    # Renew: a renewer may; an unknown HMAC is not found; a stranger is not the owner.
    r = tool(tokens.sasl, _user_jaas("bob"), tmp_path, "--renew", "--hmac", token.hmac,
             "--renew-time-period", 60000)
    assert r.rc == 0 and "Completed renew operation" in r.out, r.err[-2000:]
    bogus = "A" * 86 + "=="
    r = tool(tokens.sasl, _user_jaas("alice"), tmp_path, "--renew", "--hmac", bogus,
             "--renew-time-period", 60000)
    assert refused(r, "DelegationTokenNotFoundException"), r.err[-2000:]
    r = tool(tokens.sasl, _user_jaas("carol"), tmp_path, "--expire", "--hmac", token.hmac,
             "--expiry-time-period", -1)
    assert refused(r, "DelegationTokenOwnerMismatchException"), r.err[-2000:]

    # Expire now: gone from describe, no longer logs in, no longer renewable.
    r = tool(tokens.sasl, _user_jaas("alice"), tmp_path, "--expire", "--hmac", token.hmac,
             "--expiry-time-period", -1)
    assert r.rc == 0 and "Completed expire operation" in r.out, r.err[-2000:]
    assert describe(tokens, tmp_path, "alice") == []
    errors = token_login_refused(tokens, token, topic_name)
    assert any(SCRAM_REFUSED in e for e in errors), errors
    r = tool(tokens.sasl, _user_jaas("alice"), tmp_path, "--renew", "--hmac", token.hmac,
             "--renew-time-period", 60000)
    assert refused(r, "DelegationTokenNotFoundException"), r.err[-2000:]


def test_an_expired_token_is_removed_by_the_periodic_check(tokens, tmp_path, topic_name):
    create_topic(tokens.plaintext, topic_name)
    # Expires 1.5 s from now; the broker checks every second.
    token = create(tokens, tmp_path, "alice")
    r = tool(tokens.sasl, _user_jaas("alice"), tmp_path, "--expire", "--hmac", token.hmac,
             "--expiry-time-period", 1500)
    assert r.rc == 0 and "Completed expire operation" in r.out, r.err[-2000:]
    deadline = time.monotonic() + 30
    while any(x.token_id == token.token_id for x in describe(tokens, tmp_path, "alice")):
        assert time.monotonic() < deadline, "the expired token was never removed"
        time.sleep(1)
    errors = token_login_refused(tokens, token, topic_name)
    assert any(SCRAM_REFUSED in e for e in errors), errors


def test_a_token_survives_a_broker_restart(module_broker_factory, tmp_path, topic_name):
    t = _start(module_broker_factory, **{"delegation.token.secret.key": SECRET})
    create_topic(t.plaintext, topic_name)
    token = create(t, tmp_path, "alice", "--renewer-principal", "User:bob")
    t.broker.restart()
    _wait_for_login(t, "alice")
    assert [x.token_id for x in describe(t, tmp_path, "alice")] == [token.token_id]
    produced, consumed, errors = produce_and_consume(t, token, topic_name)
    assert produced == ["t0", "t1", "t2"], errors
    assert consumed == ["t0", "t1", "t2"], errors


def test_without_a_secret_key_tokens_are_disabled(module_broker_factory, tmp_path):
    t = _start(module_broker_factory)
    r = tool(t.sasl, _user_jaas("alice"), tmp_path, "--create", "--max-life-time-period", -1)
    assert r.rc != 0 and refused(r, "DelegationTokenDisabledException"), r.err[-2000:]
    r = tool(t.sasl, _user_jaas("alice"), tmp_path, "--describe", "--owner-principal",
             "User:alice")
    assert r.rc != 0 and refused(r, "DelegationTokenDisabledException"), r.err[-2000:]
