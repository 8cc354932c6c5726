"""Transactions with confluent-kafka (librdkafka): commit/abort mixes seen by read_committed
and read_uncommitted consumers, zombie fencing with Kafka's error, and offsets sent to the
transaction (consume-transform-produce). Runs against Strata or, with
STRATA_TEST_TARGET=kafka, the reference broker."""

import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from helpers import QUIET, consume, create_topic

TIMEOUT = 30


def _txn_producer(bootstrap, txn_id, **conf):
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                  "transaction.timeout.ms": 60000, **QUIET, **conf})
    p.init_transactions(TIMEOUT)
    return p


def _values(recs):
    return sorted(r.value for r in recs)


def test_read_committed_sees_only_committed_transactions_and_read_uncommitted_sees_all(
        broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=2)
    p = _txn_producer(broker.bootstrap, "txn-" + uuid.uuid4().hex)
    expected_committed, everything = [], []
    for i in range(6):
        p.begin_transaction()
        vals = [b"t%d-%d" % (i, j) for j in range(5)]
        for j, v in enumerate(vals):
            p.produce(topic_name, value=v, partition=j % 2)
        everything += vals
        p.flush(TIMEOUT)  # abort_transaction() purges records not sent yet
        if i % 2 == 0:
            p.commit_transaction(TIMEOUT)
            expected_committed += vals
        else:
            p.abort_transaction(TIMEOUT)
    # A last open transaction: invisible to read_committed, and it holds the LSO back.
    p.begin_transaction()
    p.produce(topic_name, value=b"open", partition=0)
    p.flush(TIMEOUT)
    committed = consume(broker.bootstrap, topic_name, len(expected_committed), partitions=(0, 1),
                        conf={"isolation.level": "read_committed"})
    assert _values(committed) == sorted(expected_committed)
    uncommitted = consume(broker.bootstrap, topic_name, len(everything) + 1, partitions=(0, 1),
                          conf={"isolation.level": "read_uncommitted"})
    assert _values(uncommitted) == sorted(everything + [b"open"])
    p.commit_transaction(TIMEOUT)
    committed = consume(broker.bootstrap, topic_name, len(expected_committed) + 1,
                        partitions=(0, 1), conf={"isolation.level": "read_committed"})
    assert _values(committed) == sorted(expected_committed + [b"open"])


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=1)
    txn_id = "zombie-" + uuid.uuid4().hex
    old = _txn_producer(broker.bootstrap, txn_id)
    old.begin_transaction()
    old.produce(topic_name, value=b"zombie")
    old.flush(TIMEOUT)
    new = _txn_producer(broker.bootstrap, txn_id)  # aborts the zombie's transaction
    new.begin_transaction()
    new.produce(topic_name, value=b"live")
    new.commit_transaction(TIMEOUT)
    with pytest.raises(KafkaException) as ei:
        old.produce(topic_name, value=b"late")
        old.commit_transaction(TIMEOUT)
    err = ei.value.args[0]
    assert err.fatal(), err
    assert err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                          KafkaError.INVALID_PRODUCER_EPOCH), err
    got = consume(broker.bootstrap, topic_name, 1, conf={"isolation.level": "read_committed"})
    assert [r.value for r in got] == [b"live"]


def test_offsets_sent_to_a_transaction_are_committed_with_it(broker, topic_name):
    src, dst = topic_name + "-in", topic_name + "-out"
    create_topic(broker.bootstrap, src, partitions=1)
    create_topic(broker.bootstrap, dst, partitions=1)
    seed = Producer({"bootstrap.servers": broker.bootstrap, **QUIET})
    for i in range(10):
        seed.produce(src, value=b"in-%d" % i)
    seed.flush(TIMEOUT)
    group = "ctp-" + uuid.uuid4().hex
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "isolation.level": "read_committed", **QUIET})
    c.assign([TopicPartition(src, 0, 0)])
    p = _txn_producer(broker.bootstrap, "ctp-" + uuid.uuid4().hex)
    msgs = []
    while len(msgs) < 10:
        m = c.poll(1.0)
        if m is not None and not m.error():
            msgs.append(m)
    # First 5 committed with their offsets, the next 5 aborted.
    for batch, commit in ((msgs[:5], True), (msgs[5:], False)):
        p.begin_transaction()
        for m in batch:
            p.produce(dst, value=m.value().replace(b"in", b"out"))
        p.flush(TIMEOUT)
        p.send_offsets_to_transaction([TopicPartition(src, 0, batch[-1].offset() + 1)],
                                      c.consumer_group_metadata(), TIMEOUT)
        if commit:
            p.commit_transaction(TIMEOUT)
        else:
            p.abort_transaction(TIMEOUT)
    committed = c.committed([TopicPartition(src, 0)], timeout=TIMEOUT)
    assert committed[0].offset == 5
    c.close()
    out = consume(broker.bootstrap, dst, 5, conf={"isolation.level": "read_committed"})
    assert [r.value for r in out] == [b"out-%d" % i for i in range(5)]
