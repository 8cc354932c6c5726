"""Share groups (KIP-932: ShareGroupHeartbeat, ShareFetch, ShareAcknowledge) driven by the
official Java client's KafkaShareConsumer (tests/java's ShareConsumerApp, one JVM per member),
plus raw ShareFetch share-session errors. Runs against Strata or, with
STRATA_TEST_TARGET=kafka, the reference broker (Kafka 4.4 finalizes share.version=2 by default,
so the reference broker needs no extra setting).

Every test sets the group's `share.auto.offset.reset=earliest` (the default, latest, would skip
records produced before the group starts) with IncrementalAlterConfigs on the GROUP resource
(type 32; librdkafka has no such config resource type, so the request is sent raw). Other group
configs used: `share.record.lock.duration.ms` (15000..60000 with the broker's default bounds),
`share.delivery.count.limit` (at least 2) and `share.isolation.level`.

Skipped when the Java classes are not built (scripts/build-java-tests.sh)."""

from __future__ import annotations

import collections
import time
import uuid

import pytest
from confluent_kafka import Producer

from conftest import TARGET
from helpers import QUIET, consume, create_topic, produce
from java_apps import JavaProcess, skip_reason
from rawkafka import Conn, Reader, encode_compact_string as cs, encode_uvarint as uv

MAIN = "io.strata.interop.ShareConsumerApp"
_SKIP = skip_reason("clients", MAIN)
pytestmark = [pytest.mark.skipif(_SKIP is not None, reason=f"Java share consumer: {_SKIP}"),
              pytest.mark.groups]

GROUP_RESOURCE = 32
API_INCREMENTAL_ALTER_CONFIGS, API_SHARE_FETCH = 44, 78
SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH, INVALID_REQUEST = 122, 123, 42
# The first member of a new share group waits for the group's share-partition state to be
# initialised (about 6 s on Kafka); every wait below is generous on top of that.
JOIN_S = 40


# ---------------------------------------------------------------------------- helpers

def set_group_configs(bootstrap: str, group: str, configs: dict) -> None:
    """IncrementalAlterConfigs v1 (SET) on the GROUP config resource; asserts success."""
    body = uv(2) + bytes([GROUP_RESOURCE]) + cs(group) + uv(len(configs) + 1)
    for k, v in configs.items():
        body += cs(k) + b"\x00" + cs(str(v)) + b"\x00"
    body += b"\x00" + b"\x00" + b"\x00"  # resource tags, validate_only=false, request tags
    with Conn(bootstrap) as conn:
        r = Reader(conn.request_flexible(API_INCREMENTAL_ALTER_CONFIGS, 1, body))
    r.int32()
    assert r.uvarint() - 1 == 1
    err, msg = r.int16(), r.compact_string()
    assert (err, msg) == (0, None), f"setting {configs} on group {group}: error {err} {msg}"


def share_group(bootstrap: str, **configs) -> str:
    """A new share group name with share.auto.offset.reset=earliest and the given group configs
    (keyword names with '_' for '.', e.g. share_record_lock_duration_ms=15000)."""
    group = f"share-{uuid.uuid4().hex[:10]}"
    conf = {"share.auto.offset.reset": "earliest"}
    conf.update({k.replace("_", "."): v for k, v in configs.items()})
    set_group_configs(bootstrap, group, conf)
    return group


def produce_numbered(bootstrap: str, topic: str, start: int, end: int, **conf):
    """Records key k<i> / value v<i> for i in [start, end) to partition 0, acks=all."""
    produce(bootstrap, topic, [{"key": b"k%d" % i, "value": b"v%d" % i, "partition": 0}
                               for i in range(start, end)], conf=conf)


class ShareApp:
    """One ShareConsumerApp member (a JVM), its JSON events kept in order."""

    def __init__(self, tmp_path, bootstrap, group, topic, mode, name, *extra):
        self.name = name
        args = ["--bootstrap", bootstrap, "--group", group, "--topic", topic, "--mode", mode,
                "--client-id", name, *extra]
        self.proc = JavaProcess("clients", MAIN, args, tmp_path / f"{name}.stderr", stdin=True)

    def events(self, kind=None):
        evs = list(self.proc.all_events)
        return evs if kind is None else [e for e in evs if e.get("event") == kind]

    def records(self):
        return self.events("record")

    def accepted(self):
        return [r["offset"] for r in self.records() if r["ack"] == "ACCEPT"]

    def wait_for(self, pred, timeout, what):
        ev = self.proc.wait_for(pred, timeout)
        assert ev is not None, f"{self.name}: no {what} within {timeout}s\n{self.history()}"
        return ev

    def wait_until(self, cond, timeout, what, apps=None):
        """Poll cond() (over all events so far) until it holds."""
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} not reached within {timeout}s\n"
                                     + "\n".join(a.history() for a in (apps or [self])))
            if self.proc.proc.poll() is not None and not cond():
                raise AssertionError(f"{self.name} exited ({self.proc.proc.returncode}) before "
                                     f"{what}\n" + "\n".join(a.history() for a in (apps or [self])))
            time.sleep(0.1)

    def close(self, timeout=60):
        """Ask the app to close its consumer (KafkaShareConsumer.close) and wait for it."""
        if self.proc.proc.poll() is None:
            self.proc.send("close")
        self.finish(timeout)

    def finish(self, timeout=60):
        rc = self.proc.wait(timeout)
        assert rc == 0, f"{self.name} exited {rc}\n{self.history()}"
        assert self.events("done"), f"{self.name}: no done event\n{self.history()}"
        self.assert_no_errors()

    def assert_no_errors(self):
        bad = [e for e in self.events() if e.get("error") or e.get("event") in ("error", "poll_error")]
        assert not bad, f"{self.name}: errors {bad[:5]}\n{self.history()}"

    def history(self, n=12):
        evs = [e for e in self.events() if e.get("event") != "record"]
        recs = [(r["offset"], r["delivery_count"], r["ack"]) for r in self.records()]
        return (f"--- {self.name} (rc {self.proc.proc.poll()}): {len(recs)} records "
                f"{recs[:20]}{'...' if len(recs) > 20 else ''}\n    events {evs[-n:]}\n"
                f"    stderr: {self.proc.stderr_tail(10)}")


@pytest.fixture
def apps(tmp_path):
    """start(bootstrap, group, topic, mode, name, *extra) -> a ShareApp; all are killed at
    teardown."""
    started: list[ShareApp] = []

    def start(bootstrap, group, topic, mode, name, *extra):
        app = ShareApp(tmp_path, bootstrap, group, topic, mode, name, *extra)
        started.append(app)
        return app

    yield start
    for a in started:
        a.proc.close()


def check_history(apps_, produced: dict[int, bytes], accepted_once=True):
    """Per offset, over every member: delivery counts go 1, 2, ... without gaps; only the last
    delivery may be accepted (an accepted record never comes back); with accepted_once, every
    produced offset ends accepted exactly once. Returns {offset: [deliveries]}."""
    by_offset = collections.defaultdict(list)
    for a in apps_:
        for r in a.records():
            by_offset[r["offset"]].append(r)
    history = "\n".join(a.history() for a in apps_)
    unexpected = sorted(set(by_offset) - set(produced))
    assert not unexpected, f"offsets never produced were delivered: {unexpected[:10]}\n{history}"
    for off, deliveries in by_offset.items():
        deliveries.sort(key=lambda r: (r["delivery_count"], r["t"]))
        counts = [r["delivery_count"] for r in deliveries]
        assert counts == list(range(1, len(counts) + 1)), \
            f"offset {off}: delivery counts {counts} ({[d['member'] for d in deliveries]})\n{history}"
        assert all(d["ack"] != "ACCEPT" for d in deliveries[:-1]), \
            f"offset {off} delivered again after it was accepted: {deliveries}\n{history}"
        assert all((d["key"], d["value"]) == ("k%d" % off, produced[off].decode())
                   for d in deliveries), f"offset {off}: wrong record {deliveries}"
    if accepted_once:
        accepted = collections.Counter(r["offset"] for a in apps_ for r in a.records()
                                       if r["ack"] == "ACCEPT")
        missing = sorted(set(produced) - set(accepted))
        twice = sorted(o for o, c in accepted.items() if c > 1)
        assert not missing and not twice, \
            f"{len(missing)} offsets never accepted (e.g. {missing[:10]}), accepted twice: " \
            f"{twice[:10]}\n{history}"
    return by_offset


def numbered(start, end):
    return {i: b"v%d" % i for i in range(start, end)}


# ---------------------------------------------------------------------------- tests

def test_share_consumers_split_one_partition_and_accept_each_record_once(broker, topic_name, apps):
    n = 2000
    create_topic(broker.bootstrap, topic_name, partitions=1)
    group = share_group(broker.bootstrap)
    # Small producer batches: a share fetch acquires whole batches (Kafka's batch_optimized
    # acquire mode may exceed max.poll.records to keep to batch boundaries).
    produce_numbered(broker.bootstrap, topic_name, 0, n, **{"batch.num.messages": 50})
    members = [apps(broker.bootstrap, group, topic_name, "accept", f"split-{i}",
                    "--max-poll-records", 50, "--record-delay-ms", 2) for i in range(3)]
    members[0].wait_until(lambda: len({o for m in members for o in m.accepted()}) >= n,
                          JOIN_S + 20, f"all {n} records accepted", members)
    time.sleep(1.0)  # anything delivered twice would show up now
    for m in members:
        m.close()
    check_history(members, numbered(0, n))
    assert all(r["delivery_count"] == 1 for m in members for r in m.records()), \
        "a record was delivered twice although every delivery was accepted"
    # Kafka spreads one partition's records over the members that poll it (each fetch
    # acquires the next available batches): more than one member must have received some.
    counts = {m.name: len(m.records()) for m in members}
    print(f"records per member: {counts}")
    assert sum(1 for c in counts.values() if c) >= 2, f"one member got everything: {counts}"
    # Every acknowledgement was confirmed by the commit callback.
    for m in members:
        confirmed = sorted(o for e in m.events("ack_result") for o in e["offsets"])
        assert confirmed == sorted(m.accepted()), m.history()


def test_records_held_by_a_stalled_consumer_are_redelivered_after_the_lock_expires(
        broker, topic_name, apps):
    lock_ms = 15000  # the smallest group value the broker's defaults allow
    create_topic(broker.bootstrap, topic_name, partitions=1)
    group = share_group(broker.bootstrap, share_record_lock_duration_ms=lock_ms)
    produce_numbered(broker.bootstrap, topic_name, 0, 20)
    # A polls once and then neither acknowledges nor polls again, but stays connected (its
    # heartbeats go on): its records stay acquired until their lock expires.
    a = apps(broker.bootstrap, group, topic_name, "hold", "stalled")
    holding = a.wait_for(lambda e: e.get("event") == "holding", JOIN_S, "holding")
    held = sorted(r["offset"] for r in a.records())
    assert held and all(r["delivery_count"] == 1 and r["ack"] is None for r in a.records())
    b = apps(broker.bootstrap, group, topic_name, "accept", "successor")
    b.wait_until(lambda: set(b.accepted()) >= set(range(20)), lock_ms / 1000 + 30,
                 "all records accepted by the successor", [a, b])
    time.sleep(1.0)
    b.close()
    a.proc.kill9()
    by_offset = check_history([a, b], numbered(0, 20))
    for off in held:
        assert [(d["member"], d["delivery_count"]) for d in by_offset[off]] == \
            [("stalled", 1), ("successor", 2)], by_offset[off]
    # Not before the lock expired: the successor's first copy of a held record came at least
    # about lock_ms after the stalled member printed it.
    first = min(r["t"] for r in b.records() if r["offset"] in held)
    waited = first - min(r["t"] for r in a.records())
    assert waited >= lock_ms - 2000, f"held records redelivered after {waited} ms < lock {lock_ms}"
    assert holding["count"] == len(held)


def test_records_held_by_a_killed_consumer_are_released_when_its_connection_closes(
        broker, topic_name, apps):
    lock_ms = 60000  # the largest allowed: redelivery must not wait for the lock
    create_topic(broker.bootstrap, topic_name, partitions=1)
    group = share_group(broker.bootstrap, share_record_lock_duration_ms=lock_ms)
    produce_numbered(broker.bootstrap, topic_name, 0, 20)
    a = apps(broker.bootstrap, group, topic_name, "hold", "killed")
    a.wait_for(lambda e: e.get("event") == "holding", JOIN_S, "holding")
    held = sorted(r["offset"] for r in a.records())
    assert held
    a.proc.kill9()
    killed_at = time.time() * 1000
    b = apps(broker.bootstrap, group, topic_name, "accept", "successor")
    # Kafka releases the acquired records of a share session when its connection closes
    # (about 1 s here), long before the 60 s lock would expire.
    b.wait_until(lambda: set(b.accepted()) >= set(range(20)), 30,
                 "all records accepted by the successor well before the lock expires", [a, b])
    time.sleep(1.0)
    b.close()
    by_offset = check_history([a, b], numbered(0, 20))
    for off in held:
        assert [(d["member"], d["delivery_count"]) for d in by_offset[off]] == \
            [("killed", 1), ("successor", 2)], by_offset[off]
    assert max(r["t"] for r in b.records()) - killed_at < lock_ms / 2


def test_closing_a_consumer_releases_the_records_it_did_not_acknowledge(broker, topic_name, apps):
    create_topic(broker.bootstrap, topic_name, partitions=1)
    group = share_group(broker.bootstrap, share_record_lock_duration_ms=60000)
    produce_numbered(broker.bootstrap, topic_name, 0, 20)
    a = apps(broker.bootstrap, group, topic_name, "hold", "closer")
    a.wait_for(lambda e: e.get("event") == "holding", JOIN_S, "holding")
    closed_at = time.time() * 1000
    a.close()  # explicit mode, nothing acknowledged: close() gives the records back
    b = apps(broker.bootstrap, group, topic_name, "accept", "successor")
    b.wait_until(lambda: set(b.accepted()) >= set(range(20)), 30,
                 "all records accepted by the successor", [a, b])
    time.sleep(1.0)
    b.close()
    by_offset = check_history([a, b], numbered(0, 20))
    for off in (r["offset"] for r in a.records()):
        assert [d["delivery_count"] for d in by_offset[off]] == [1, 2]
    assert max(r["t"] for r in b.records()) - closed_at < 30000
    assert not a.events("ack_result"), "close() sent no acknowledgement the app made"


def test_released_records_come_back_with_a_higher_delivery_count_and_rejected_ones_never(
        broker, topic_name, apps):
    n = 30
    create_topic(broker.bootstrap, topic_name, partitions=1)
    group = share_group(broker.bootstrap)
    produce_numbered(broker.bootstrap, topic_name, 0, n)
    # mixed: offset % 3 == 0 accepted; == 1 released on its first delivery, accepted on the
    # second; == 2 rejected.
    a = apps(broker.bootstrap, group, topic_name, "mixed", "mixed")
    a.wait_until(lambda: len(a.records()) >= n + n // 3, JOIN_S, "every delivery")
    time.sleep(1.5)  # a rejected or accepted record coming back would show up now
    a.close()
    by_offset = check_history([a], numbered(0, n), accepted_once=False)
    want = {}
    for off in range(n):
        want[off] = {0: [(1, "ACCEPT")], 1: [(1, "RELEASE"), (2, "ACCEPT")],
                     2: [(1, "REJECT")]}[off % 3]
    got = {off: [(d["delivery_count"], d["ack"]) for d in ds] for off, ds in by_offset.items()}
    assert got == want
    # Every acknowledgement (accept, release, reject) was confirmed.
    confirmed = collections.Counter(o for e in a.events("ack_result") for o in e["offsets"])
    assert confirmed == collections.Counter(r["offset"] for r in a.records())

    # A new member of the group gets none of them (accepted and rejected records are done),
    # only a record produced afterwards.
    produce_numbered(broker.bootstrap, topic_name, n, n + 1)
    b = apps(broker.bootstrap, group, topic_name, "accept", "later")
    b.wait_until(lambda: n in b.accepted(), JOIN_S, "the new record")
    time.sleep(1.5)
    b.close()
    assert [(r["offset"], r["delivery_count"]) for r in b.records()] == [(n, 1)]


def test_records_past_the_delivery_count_limit_are_archived(broker, topic_name, apps):
    n, limit = 10, 2  # 2 is the smallest share.delivery.count.limit Kafka accepts
    create_topic(broker.bootstrap, topic_name, partitions=1)
    group = share_group(broker.bootstrap, share_delivery_count_limit=limit)
    produce_numbered(broker.bootstrap, topic_name, 0, n)
    a = apps(broker.bootstrap, group, topic_name, "release", "releaser")
    a.wait_until(lambda: len(a.records()) >= n * limit, JOIN_S, f"{n * limit} deliveries")
    time.sleep(2.0)  # a third delivery would show up now
    a.close()
    by_offset = check_history([a], numbered(0, n), accepted_once=False)
    assert {off: [(d["delivery_count"], d["ack"]) for d in ds] for off, ds in by_offset.items()} \
        == {off: [(c, "RELEASE") for c in range(1, limit + 1)] for off in range(n)}

    produce_numbered(broker.bootstrap, topic_name, n, n + 1)
    b = apps(broker.bootstrap, group, topic_name, "accept", "later")
    b.wait_until(lambda: n in b.accepted(), JOIN_S, "the new record")
    time.sleep(1.5)
    b.close()
    assert [(r["offset"], r["delivery_count"]) for r in b.records()] == [(n, 1)]


def test_implicit_acknowledgement_accepts_on_the_next_poll(broker, topic_name, apps):
    create_topic(broker.bootstrap, topic_name, partitions=1)
    group = share_group(broker.bootstrap, share_record_lock_duration_ms=60000)
    produce_numbered(broker.bootstrap, topic_name, 0, 10)
    # implicit (share.acknowledgement.mode=implicit): the next poll accepts what the previous
    # one returned. After its second non-empty poll the app stops polling, then is closed.
    a = apps(broker.bootstrap, group, topic_name, "implicit", "implicit", "--hold-after-polls", 2)
    a.wait_until(lambda: len(a.records()) >= 10, JOIN_S, "the first batch")
    assert [r["poll"] for r in a.records()] == [1] * 10
    # The polls after the first batch accept it (acknowledgements ride on the next ShareFetch).
    ack = a.wait_for(lambda e: e.get("event") == "ack_result", 30, "implicit acknowledgement")
    assert (ack["offsets"], ack["error"]) == (list(range(10)), None)
    produce_numbered(broker.bootstrap, topic_name, 10, 20)
    a.wait_for(lambda e: e.get("event") == "holding", 30, "the second batch")
    assert sorted(r["offset"] for r in a.records() if r["poll"] == 2) == list(range(10, 20))
    a.close()  # the second batch was never followed by a poll: close() does not accept it
    assert [e["offsets"] for e in a.events("ack_result")] == [list(range(10))]

    b = apps(broker.bootstrap, group, topic_name, "accept", "successor")
    b.wait_until(lambda: set(b.accepted()) >= set(range(10, 20)), JOIN_S, "the second batch")
    time.sleep(1.5)
    b.close()
    assert sorted((r["offset"], r["delivery_count"]) for r in b.records()) == \
        [(o, 2) for o in range(10, 20)]
    assert all(r["delivery_count"] == 1 and r["ack"] is None for r in a.records())


@pytest.mark.slow
def test_accepted_records_are_not_redelivered_after_a_broker_restart(broker_factory, topic_name,
                                                                    apps):
    n = 200
    b = broker_factory(name="share-restart")
    create_topic(b.bootstrap, topic_name, partitions=1)
    group = share_group(b.bootstrap)
    produce_numbered(b.bootstrap, topic_name, 0, n, **{"batch.num.messages": 20})
    first = apps(b.bootstrap, group, topic_name, "accept", "before", "--max-poll-records", 20,
                 "--max-records", n // 2)
    first.finish(JOIN_S + 20)  # exits after n/2 records, each accepted with commitSync
    accepted = first.accepted()
    assert n // 2 <= len(accepted) < n
    confirmed = sorted(o for e in first.events("ack_result") for o in e["offsets"])
    assert confirmed == sorted(accepted)

    b.kill9()
    b.start()
    second = apps(b.bootstrap, group, topic_name, "accept", "after", "--max-poll-records", 20)
    rest = set(range(n)) - set(accepted)
    second.wait_until(lambda: set(second.accepted()) >= rest, 90, "the other records")
    time.sleep(1.5)
    second.close()
    assert not set(second.accepted()) & set(accepted), "accepted records came back"
    check_history([first, second], numbered(0, n))


def test_read_committed_share_consumer_skips_aborted_transactions(broker, topic_name, apps):
    create_topic(broker.bootstrap, topic_name, partitions=1)
    committed_group = share_group(broker.bootstrap, share_isolation_level="read_committed")
    uncommitted_group = share_group(broker.bootstrap)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "share-txn-"
                  + uuid.uuid4().hex[:8], "transaction.timeout.ms": 60000, **QUIET})
    p.init_transactions(30)
    produced, committed = {}, set()
    offset = 0
    for commit in [True, False, True, False, True]:
        p.begin_transaction()
        for _ in range(5):
            p.produce(topic_name, key=b"k%d" % offset, value=b"v%d" % offset, partition=0)
            produced[offset] = b"v%d" % offset
            if commit:
                committed.add(offset)
            offset += 1
        p.flush(30)  # abort_transaction() purges records not sent yet
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
        offset += 1  # the transaction marker
    # offsets: 0-4 committed, 5 marker, 6-10 aborted, 11 marker, 12-16 committed, ...
    assert sorted(committed) == [0, 1, 2, 3, 4, 12, 13, 14, 15, 16, 24, 25, 26, 27, 28]

    rc = apps(broker.bootstrap, committed_group, topic_name, "accept", "read-committed")
    ru = apps(broker.bootstrap, uncommitted_group, topic_name, "accept", "read-uncommitted")
    rc.wait_until(lambda: set(rc.accepted()) >= committed, JOIN_S, "the committed records", [rc, ru])
    ru.wait_until(lambda: set(ru.accepted()) >= set(produced), JOIN_S, "every record", [rc, ru])
    time.sleep(1.5)
    rc.close()
    ru.close()
    assert sorted(rc.accepted()) == sorted(committed), rc.history()
    check_history([rc], {o: v for o, v in produced.items() if o in committed})
    # read_uncommitted (the default) delivers the aborted records too, never the markers.
    check_history([ru], produced)
    assert all(r["delivery_count"] == 1 for r in rc.records() + ru.records())


# ---------------------------------------------------------------------------- raw ShareFetch

def _share_fetch(conn, group, member, epoch):
    """ShareFetch v1 without partitions -> (error_code, acquisition_lock_timeout_ms)."""
    body = cs(group) + cs(member) + epoch.to_bytes(4, "big", signed=True)
    body += (100).to_bytes(4, "big") + (1).to_bytes(4, "big")  # max wait, min bytes
    body += (1 << 20).to_bytes(4, "big") + (500).to_bytes(4, "big") + (500).to_bytes(4, "big")
    body += uv(1) + uv(1) + b"\x00"  # no topics, no forgotten topics, no tagged fields
    r = Reader(conn.request_flexible(API_SHARE_FETCH, 1, body))
    assert r.int32() == 0  # throttle
    err, msg, lock = r.int16(), r.compact_string(), r.int32()
    assert msg is None
    assert r.uvarint() - 1 == 0 and r.uvarint() - 1 == 0  # no responses, no node endpoints
    return err, lock


def test_share_fetch_session_epochs_get_kafkas_errors(broker):
    group = share_group(broker.bootstrap, share_record_lock_duration_ms=20000)
    member = uuid.uuid4().hex
    with Conn(broker.bootstrap) as conn:
        # No session yet: any epoch but 0 (open) is SHARE_SESSION_NOT_FOUND.
        for epoch in (1, 5, -1):
            assert _share_fetch(conn, group, member, epoch) == (SHARE_SESSION_NOT_FOUND, 0)
        # Epoch 0 opens a session (the member id is not checked against the group); the
        # response carries the group's record lock duration.
        assert _share_fetch(conn, group, member, 0) == (0, 20000)
        # Then epochs go 1, 2, ...: a skipped or repeated epoch is INVALID_SHARE_SESSION_EPOCH
        # and leaves the session's expected epoch as it was.
        assert _share_fetch(conn, group, member, 5) == (INVALID_SHARE_SESSION_EPOCH, 0)
        assert _share_fetch(conn, group, member, 1) == (0, 20000)
        assert _share_fetch(conn, group, member, 1) == (INVALID_SHARE_SESSION_EPOCH, 0)
        assert _share_fetch(conn, group, member, 2) == (0, 20000)
        # Epoch 0 again replaces the session; -1 closes it, after which it is not found.
        assert _share_fetch(conn, group, member, 0) == (0, 20000)
        assert _share_fetch(conn, group, member, -1) == (0, 20000)
        assert _share_fetch(conn, group, member, 1) == (SHARE_SESSION_NOT_FOUND, 0)
        # A missing member id or group id is INVALID_REQUEST.
        assert _share_fetch(conn, group, "", 0) == (INVALID_REQUEST, 0)
        assert _share_fetch(conn, group, None, 0) == (INVALID_REQUEST, 0)
        assert _share_fetch(conn, None, member, 0) == (INVALID_REQUEST, 0)


def test_rejected_records_and_those_past_the_limit_are_copied_to_the_dead_letter_topic(
        broker, topic_name, apps):
    """KIP-1191: a group naming a dead-letter topic (with errors.deadletterqueue.group.enable)
    gets one record there for each record its members reject or release at the delivery count
    limit, with Kafka's __dlq.errors.* headers; with copy.record.enable the key and value
    too. A group whose topic is not enabled for it, or whose topic breaks the broker's `dlq.`
    prefix, gets none."""
    n = 30
    create_topic(broker.bootstrap, topic_name, partitions=1)
    rejects = f"dlq.{topic_name}-rejects"
    limits = f"dlq.{topic_name}-limits"
    disabled = f"dlq.{topic_name}-disabled"
    for name, enable in ((rejects, "true"), (limits, "true"), (disabled, "false")):
        create_topic(broker.bootstrap, name, partitions=1,
                     config={"errors.deadletterqueue.group.enable": enable})
    produce_numbered(broker.bootstrap, topic_name, 0, n)

    g_rejects = share_group(broker.bootstrap)
    set_group_configs(broker.bootstrap, g_rejects, {
        "errors.deadletterqueue.topic.name": rejects,
        "errors.deadletterqueue.copy.record.enable": "true"})
    g_limits = share_group(broker.bootstrap, share_delivery_count_limit=2)
    set_group_configs(broker.bootstrap, g_limits, {"errors.deadletterqueue.topic.name": limits})
    g_disabled = share_group(broker.bootstrap)
    set_group_configs(broker.bootstrap, g_disabled,
                      {"errors.deadletterqueue.topic.name": disabled})

    # offset % 3 == 2 rejected by the first group's member; the second releases everything.
    a = apps(broker.bootstrap, g_rejects, topic_name, "mixed", "mixed")
    b = apps(broker.bootstrap, g_limits, topic_name, "release", "releaser")
    c = apps(broker.bootstrap, g_disabled, topic_name, "mixed", "disabled")
    a.wait_until(lambda: len(a.records()) >= n + n // 3, JOIN_S, "every delivery")
    b.wait_until(lambda: len(b.records()) >= 2 * n, JOIN_S, "two deliveries of each record")
    c.wait_until(lambda: len(c.records()) >= n + n // 3, JOIN_S, "every delivery")
    for app in (a, b, c):
        app.close()

    def headers(r):
        return {k: (v.decode() if v is not None else None) for k, v in r.headers}

    def by_offset(records):
        # Kafka writes each acknowledgement's copies on its own: their order may differ.
        return sorted(records, key=lambda r: int(headers(r)["__dlq.errors.offset"]))

    rejected = by_offset(consume(broker.bootstrap, rejects, n // 3, timeout=60))
    assert [headers(r) for r in rejected] == [{
        "__dlq.errors.topic": topic_name, "__dlq.errors.partition": "0",
        "__dlq.errors.offset": str(off), "__dlq.errors.group": g_rejects,
        "__dlq.errors.delivery.count": "1",
        "__dlq.errors.message": "Offset rejected by client."} for off in range(2, n, 3)]
    assert [(r.key, r.value) for r in rejected] == \
        [(b"k%d" % off, b"v%d" % off) for off in range(2, n, 3)]

    archived = by_offset(consume(broker.bootstrap, limits, n, timeout=60))
    assert [headers(r) for r in archived] == [{
        "__dlq.errors.topic": topic_name, "__dlq.errors.partition": "0",
        "__dlq.errors.offset": str(off), "__dlq.errors.group": g_limits,
        "__dlq.errors.delivery.count": "2",
        "__dlq.errors.message": "Offset delivery count exceeded the threshold."}
        for off in range(n)]
    assert all(r.key is None and r.value is None for r in archived), "copy.record is off"

    time.sleep(2)
    from helpers import watermarks
    assert watermarks(broker.bootstrap, disabled, 0)[1] == 0, "not enabled for groups"


def test_a_missing_dead_letter_topic_is_created_only_when_the_broker_allows_it(
        broker, topic_name, apps):
    """errors.deadletterqueue.auto.create.topics.enable (a cluster-wide dynamic broker
    config, false by default): off, a group naming a missing dead-letter topic gets no copy
    and no topic; on, the topic is created with errors.deadletterqueue.group.enable=true and
    receives the copies."""
    from confluent_kafka.admin import ConfigResource, ResourceType
    from helpers import admin
    from test_group_configs import inc_alter

    BROKER, SET, DELETE = 4, 0, 1
    n = 9
    create_topic(broker.bootstrap, topic_name, partitions=1)
    produce_numbered(broker.bootstrap, topic_name, 0, n)
    missing = f"dlq.{topic_name}-missing"
    created = f"dlq.{topic_name}-created"

    def run(dlq):
        group = share_group(broker.bootstrap)
        set_group_configs(broker.bootstrap, group, {"errors.deadletterqueue.topic.name": dlq})
        a = apps(broker.bootstrap, group, topic_name, "mixed", f"mixed-{dlq[-7:]}")
        a.wait_until(lambda: len(a.records()) >= n + n // 3, JOIN_S, "every delivery")
        a.close()
        return group

    run(missing)
    time.sleep(2)
    assert missing not in admin(broker.bootstrap).list_topics(timeout=10).topics

    auto = "errors.deadletterqueue.auto.create.topics.enable"
    assert inc_alter(broker.bootstrap, "", [(auto, SET, "true")], rtype=BROKER) == (0, None)
    try:
        group = run(created)
        copies = consume(broker.bootstrap, created, n // 3, timeout=60)
        # Kafka writes each acknowledgement's copies on its own: their order may differ.
        assert sorted(int(dict(r.headers)["__dlq.errors.offset"]) for r in copies) == \
            list(range(2, n, 3))
        assert {dict(r.headers)["__dlq.errors.group"] for r in copies} == {group.encode()}
        res = ConfigResource(ResourceType.TOPIC, created)
        configs = admin(broker.bootstrap).describe_configs([res])[res].result(timeout=30)
        assert configs["errors.deadletterqueue.group.enable"].value == "true"
    finally:
        assert inc_alter(broker.bootstrap, "", [(auto, DELETE, "")], rtype=BROKER) == (0, None)


@pytest.mark.skipif(TARGET == "kafka", reason="the reference Kafka broker has no remote "
                    "storage plugin configured")
def test_a_dead_letter_copy_reads_a_source_record_that_is_only_in_remote_storage(
        broker_factory, topic_name, apps, tmp_path):
    """copy.record.enable on a tiered topic whose early segments left the local disk: the
    dead-letter copies carry the key and value read back from remote storage, as Kafka's
    ShareGroupDLQRecordFetcher reads them."""
    from test_tiering import (PRODUCE_CONF, REMOTE_TOPIC_CONFIG, file_store_props,
                              local_log_start, tiered_broker_props)

    b = broker_factory(tiered_broker_props(file_store_props(tmp_path / "store")))
    n = 240
    create_topic(b.bootstrap, topic_name, partitions=1, config=REMOTE_TOPIC_CONFIG)
    dlq = f"dlq.{topic_name}"
    create_topic(b.bootstrap, dlq, partitions=1,
                 config={"errors.deadletterqueue.group.enable": "true"})
    # ~1 KiB values that do not compress: 64 KiB segments hold about 60 records each.
    import random
    values = [b"v%d:" % i + random.Random(i).randbytes(1000) for i in range(n)]
    produce(b.bootstrap, topic_name, [{"key": b"k%d" % i, "value": values[i], "partition": 0}
                                      for i in range(n)], conf=PRODUCE_CONF)
    deadline = time.monotonic() + 60
    while (local_log_start(b, topic_name, 0) or 0) < n // 2:
        assert time.monotonic() < deadline, f"local log start {local_log_start(b, topic_name, 0)}"
        time.sleep(0.2)
    group = share_group(b.bootstrap)
    set_group_configs(b.bootstrap, group, {
        "errors.deadletterqueue.topic.name": dlq,
        "errors.deadletterqueue.copy.record.enable": "true"})
    a = apps(b.bootstrap, group, topic_name, "mixed", "mixed")
    a.wait_until(lambda: len(a.records()) >= n + n // 3, JOIN_S, "every delivery")
    a.close()
    copies = sorted(consume(b.bootstrap, dlq, n // 3, timeout=60),
                    key=lambda r: int(dict(r.headers)["__dlq.errors.offset"]))
    assert [(r.key, r.value) for r in copies] == \
        [(b"k%d" % i, values[i]) for i in range(2, n, 3)]
