"""Share groups in cluster mode, driven by the Java client's KafkaShareConsumer (tests/java's
ShareConsumerApp): a share-partition's state lives with the share coordinator of its key (the
leader of a `__share_group_state` partition, replication factor 3), its in-flight records with
the leader of the topic partition. Every broker is killed with SIGKILL in turn while two
members consume, so the topic partition's leader, the group coordinator and the share
coordinator each die at least once; the whole history must hold: every record is accepted
with a confirmed acknowledgement (or, where a kill cut the answer off, had an ACCEPT of
unknown outcome and lies below the share-partition's start offset), and no record whose
acknowledgement was confirmed is ever delivered again.

Strata only (three-process quorum; the reference Kafka script runs a single node)."""

import collections
import time

import pytest
from confluent_kafka.admin import NewTopic

from conftest import TARGET
from helpers import admin
from test_cluster import bootstrap, cluster, live, partition_state, wait_until  # noqa: F401
from test_cluster_coordinators import KEY_GROUP, coordinator
from test_delete_groups import delete_groups
from test_share_group_admin import (GROUP_ID_NOT_FOUND, NONE, alter_offsets, describe_offsets,
                                    share_group_describe)
from test_share_groups import JOIN_S, ShareApp, produce_numbered, share_group

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(TARGET != "strata",
                       reason="starts a 3-node Strata quorum; kafka-ref.sh runs a single node"),
]

TOPIC = "cluster-share"
SHARE_STATE_TOPIC = "__share_group_state"


def fully_replicated(brokers, topics):
    """Whether every partition of `topics` has all three replicas in sync (asked of a live
    broker)."""
    md = admin(bootstrap(live(brokers))).list_topics(timeout=10)
    for t in topics:
        if t not in md.topics or md.topics[t].error is not None:
            return False
        for p in md.topics[t].partitions.values():
            if p.leader < 0 or len(p.isrs) < 3:
                return False
    return True


def confirmed_accepts(apps_):
    """offset -> how many times an ACCEPT of it was confirmed by the commit callback."""
    out = collections.Counter()
    for a in apps_:
        for e in a.events("ack_result"):
            if e.get("error") is None:
                out.update(e["offsets"])
    return out


def failed_accepts(apps_):
    """Offsets whose ACCEPT the commit callback reported failed: their outcome is unknown to
    the member (a leader killed after its share coordinator stored the acknowledgement, but
    before it answered, leaves the record acknowledged with the member told of an error)."""
    return {o for a in apps_ for e in a.events("ack_result") if e.get("error") is not None
            for o in e["offsets"]}


def share_start_offset(brokers, group, topic):
    """The share-partition's start offset as its group coordinator describes it: every record
    below it is acknowledged or archived (None while that is not answerable)."""
    coord = brokers[coordinator(brokers, group, KEY_GROUP) - 1]
    err, _msg, parts = describe_offsets(coord.bootstrap, 1, group, None)
    start, _epoch, _lag, perr, _m = parts.get((topic, 0), (None, None, None, None, None))
    return start if err == NONE and perr == NONE else None


def unaccepted(apps_, n):
    """What a wait for every accept found: the offsets never confirmed, how often each was
    delivered (its highest delivery count), the failed acknowledgements by error, and each
    member's history."""
    confirmed = confirmed_accepts(apps_)
    missing = sorted(set(range(n)) - set(confirmed))
    deliveries = {}
    for a in apps_:
        for r in a.records():
            deliveries[r["offset"]] = max(deliveries.get(r["offset"], 0), r["delivery_count"])
    errors = collections.Counter(e["error"] for a in apps_ for e in a.events("ack_result")
                                 if e.get("error") is not None)
    sample = [(o, deliveries.get(o)) for o in missing[:10]]
    return (f"{len(confirmed)} of {n} confirmed; never: {len(missing)}, e.g. (offset, highest "
            f"delivery count) {sample}; failed acknowledgements by error: {dict(errors)}\n"
            + "\n".join(a.history() for a in apps_))


def stop_app(app, timeout=60):
    """Close a member without asserting it saw no error (failovers surface as retriable
    poll or commit errors in the client)."""
    if app.proc.proc.poll() is None:
        app.proc.send("close")
    app.proc.wait(timeout)
    if app.proc.proc.poll() is None:
        app.proc.kill9()


@pytest.mark.timeout(420)
def test_share_consumers_lose_and_double_nothing_while_every_broker_is_killed_in_turn(
        cluster, tmp_path):
    n = 4000
    admin(bootstrap(cluster)).create_topics(
        [NewTopic(TOPIC, num_partitions=1, replication_factor=3,
                  config={"min.insync.replicas": "2"})], request_timeout=30)[TOPIC].result()
    servers = bootstrap(cluster)
    group = share_group(cluster[0].bootstrap)  # one address: the request is sent raw
    produce_numbered(servers, TOPIC, 0, n, **{"batch.num.messages": 50, "acks": "all"})

    members = [ShareApp(tmp_path, servers, group, TOPIC, "accept", f"member-{i}",
                        "--max-poll-records", 50, "--record-delay-ms", 8) for i in range(2)]
    try:
        def accepted():
            return len(confirmed_accepts(members))

        wait_until("the members accept records", lambda: accepted() >= 200, timeout=JOIN_S + 20)
        wait_until("__share_group_state fully replicated",
                   lambda: fully_replicated(cluster, [TOPIC, SHARE_STATE_TOPIC]), timeout=60)
        for victim in cluster:
            leader, _ = partition_state(cluster, TOPIC)
            before = accepted()
            victim.kill9()
            print(f"killed node {victim.name} (topic leader was {leader}) at {before} accepted")
            # Consumption goes on with two brokers of three.
            wait_until(f"progress with {victim.name} down",
                       lambda: accepted() >= min(n, before + 300), timeout=90)
            victim.start()
            wait_until("all replicas back in sync",
                       lambda: fully_replicated(cluster, [TOPIC, SHARE_STATE_TOPIC]), timeout=90)
        def settled():
            # Every record confirmed, or the few left each had an ACCEPT of unknown outcome
            # and the share-partition holds them done.
            left = set(range(n)) - set(confirmed_accepts(members))
            if not left:
                return True
            if not left <= failed_accepts(members):
                return False
            start = share_start_offset(cluster, group, TOPIC)
            return start is not None and start >= n

        try:
            wait_until("every record accepted", settled, timeout=180)
        except AssertionError as e:
            raise AssertionError(f"{e}: {unaccepted(members, n)}") from None
        time.sleep(2.0)  # a redelivery of a confirmed record would show up now
    finally:
        for m in members:
            stop_app(m)

    history = "\n".join(m.history() for m in members)
    confirmed = confirmed_accepts(members)
    missing = sorted(set(range(n)) - set(confirmed))
    twice = sorted(o for o, c in confirmed.items() if c > 1)
    # A record never confirmed must have had an ACCEPT whose outcome the member did not learn,
    # and the broker must hold it done: anything else is a record skipped or lost.
    unknown = set(missing) - failed_accepts(members)
    assert not unknown, (f"{len(unknown)} records never confirmed and never accepted with an "
                         f"unknown outcome (e.g. {sorted(unknown)[:10]})\n{history}")
    start = share_start_offset(cluster, group, TOPIC)
    assert start == n, f"the share-partition starts at {start}, not {n}\n{history}"
    assert not twice, f"confirmed twice (redelivered after a confirmed ACCEPT): {twice[:10]}\n{history}"
    assert set(confirmed) <= set(range(n))
    # Every delivery carried the record produced at its offset.
    for m in members:
        for r in m.records():
            assert (r["key"], r["value"]) == ("k%d" % r["offset"], "v%d" % r["offset"]), r
    # A record delivered after its accept was confirmed would be a loss of the promise:
    # per member, no record of an offset comes after a confirmed ack of it.
    for m in members:
        done = set()
        for e in m.events():
            if e.get("event") == "ack_result" and e.get("error") is None:
                done.update(e["offsets"])
            elif e.get("event") == "record":
                assert e["offset"] not in done, f"{m.name} got {e} after its accept was confirmed"
    redelivered = sum(1 for m in members for r in m.records() if r["delivery_count"] > 1)
    print(f"{n - len(missing)} records confirmed once each, {len(missing)} acknowledged with "
          f"an outcome the member did not learn; {redelivered} redeliveries across the kills")


@pytest.mark.timeout(300)
def test_share_group_offsets_are_described_reset_and_deleted_after_a_coordinator_kill9(
        cluster, tmp_path):
    """The admin operations need the share-partitions' state, which the share coordinators
    keep: after the group coordinator dies (and the group's membership with it), the next one
    still describes the start offset, resets it, and deletes the group's state."""
    n = 50
    admin(bootstrap(cluster)).create_topics(
        [NewTopic(TOPIC, num_partitions=1, replication_factor=3,
                  config={"min.insync.replicas": "2"})], request_timeout=30)[TOPIC].result()
    group = share_group(cluster[0].bootstrap)
    produce_numbered(bootstrap(cluster), TOPIC, 0, n, acks="all")
    first = ShareApp(tmp_path, bootstrap(cluster), group, TOPIC, "accept", "first")
    try:
        wait_until("every record accepted", lambda: len(confirmed_accepts([first])) >= n,
                   timeout=JOIN_S + 20)
    finally:
        stop_app(first)

    victim = coordinator(cluster, group, KEY_GROUP)
    cluster[victim - 1].kill9()
    successor_id = coordinator(cluster, group, KEY_GROUP, not_node=victim)
    successor = cluster[successor_id - 1]

    def offsets():
        err, msg, parts = describe_offsets(successor.bootstrap, 1, group, None)
        assert (err, msg) == (NONE, None), (err, msg)
        return {tp: (start, lag, e) for tp, (start, _epoch, lag, e, _m) in parts.items()}

    # Retriable while the killed broker's partitions (of __share_group_state too) move.
    wait_until("the group's start offset described by the next coordinator",
               lambda: offsets() == {(TOPIC, 0): (n, 0, NONE)}, timeout=60)
    assert share_group_describe(successor.bootstrap, [group])[group][:3] == (NONE, None, "Empty")

    # Reset to the start: a new member gets every record again, each once.
    assert alter_offsets(successor.bootstrap, group, {TOPIC: {0: 0}}) == \
        (NONE, None, {(TOPIC, 0): (NONE, None)})
    assert offsets() == {(TOPIC, 0): (0, n, NONE)}
    cluster[victim - 1].start()
    again = ShareApp(tmp_path, bootstrap(cluster), group, TOPIC, "accept", "again")
    try:
        wait_until("every record accepted again", lambda: len(confirmed_accepts([again])) >= n,
                   timeout=JOIN_S + 20)
        time.sleep(1.0)
    finally:
        stop_app(again)
    assert sorted(confirmed_accepts([again]).elements()) == list(range(n))

    # Deleting the group deletes its state on the share coordinator.
    coord = cluster[coordinator(cluster, group, KEY_GROUP) - 1]
    wait_until("the group empty", lambda: share_group_describe(coord.bootstrap, [group])[group][2]
               == "Empty", timeout=60)
    assert delete_groups(coord.bootstrap, 3, [group]) == {group: (NONE, None)}
    assert share_group_describe(coord.bootstrap, [group])[group][0] == GROUP_ID_NOT_FOUND
    assert describe_offsets(coord.bootstrap, 1, group, None) == (NONE, None, {})


@pytest.mark.timeout(300)
def test_dead_letter_copies_reach_a_topic_led_by_another_broker(cluster, tmp_path):
    """A share group's dead-letter topic whose partition another broker leads: the source
    partition's leader (broker 1) produces the copies to it over the inter-broker listener,
    acks=all on three replicas."""
    from helpers import consume
    from test_share_groups import set_group_configs

    n = 30
    source, dlq = "cluster-share-source", "dlq.cluster-share"
    a = admin(bootstrap(cluster))
    for name, assignment, config in (
            (source, [[1, 2, 3]], {}),
            (dlq, [[2, 3, 1]], {"errors.deadletterqueue.group.enable": "true"})):
        topic = NewTopic(name, num_partitions=1, replication_factor=-1,
                         replica_assignment=assignment, config=config)
        a.create_topics([topic], request_timeout=30)[name].result()
    wait_until("both topics fully replicated", lambda: fully_replicated(cluster, [source, dlq]))
    servers = bootstrap(cluster)
    produce_numbered(servers, source, 0, n, acks="all")
    group = share_group(cluster[0].bootstrap)
    set_group_configs(cluster[0].bootstrap, group, {
        "errors.deadletterqueue.topic.name": dlq,
        "errors.deadletterqueue.copy.record.enable": "true"})
    app = ShareApp(tmp_path, servers, group, source, "mixed", "mixed")
    app.wait_until(lambda: len(app.records()) >= n + n // 3, JOIN_S, "every delivery")
    stop_app(app)
    want = [(b"k%d" % off, b"v%d" % off, str(off).encode()) for off in range(2, n, 3)]
    copies = consume(servers, dlq, n // 3, timeout=60)
    got = sorted(((r.key, r.value, dict(r.headers)["__dlq.errors.offset"]) for r in copies),
                 key=lambda t: int(t[2]))
    assert got == want
    assert fully_replicated(cluster, [dlq])
