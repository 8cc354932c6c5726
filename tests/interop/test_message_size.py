"""Record batch size limits: max.message.bytes (topic) and message.max.bytes (broker).
Batches just under the limit are accepted; over it the produce fails with
MESSAGE_TOO_LARGE (librdkafka: MSG_SIZE_TOO_LARGE, kafka-python: MessageSizeTooLargeError)."""

import random

import pytest
from confluent_kafka import KafkaError

from helpers import consume, create_topic, kp_produce, produce

TOPIC_LIMIT = 100_000
BROKER_LIMIT = 50_000
# A one-record batch costs 61 bytes of batch header plus ~15 bytes of record framing.
SLACK = 200

# Let the clients send large requests: only the broker's limit is under test.
CONFLUENT_BIG = {"message.max.bytes": 4_000_000, "linger.ms": 0, "compression.type": "none",
                 "message.timeout.ms": 30000}
KP_BIG = {"max_request_size": 4_000_000, "linger_ms": 0}


def _blob(n, seed=0):
    return random.Random(seed).randbytes(n)  # incompressible


def _produce_one(bootstrap, topic, value, **conf):
    delivered, errors = produce(bootstrap, topic, [{"value": value}],
                                conf={**CONFLUENT_BIG, **conf}, expect_errors=True)
    return delivered, errors


@pytest.fixture(scope="module")
def small_broker(module_broker_factory):
    return module_broker_factory(props={"message.max.bytes": str(BROKER_LIMIT)}, name="small")


def test_record_just_under_topic_max_message_bytes_is_accepted(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, config={"max.message.bytes": TOPIC_LIMIT})
    value = _blob(TOPIC_LIMIT - SLACK)
    delivered, errors = _produce_one(broker.bootstrap, topic_name, value)
    assert not errors and len(delivered) == 1
    (r,) = consume(broker.bootstrap, topic_name, 1, conf={"fetch.max.bytes": 4_000_000})
    assert r.value == value


def test_record_over_topic_max_message_bytes_fails_with_message_too_large(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, config={"max.message.bytes": TOPIC_LIMIT})
    delivered, errors = _produce_one(broker.bootstrap, topic_name, _blob(TOPIC_LIMIT + 1))
    assert not delivered
    assert [e.code() for e in errors] == [KafkaError.MSG_SIZE_TOO_LARGE]
    # Nothing was appended, and the partition still accepts normal records.
    delivered, errors = _produce_one(broker.bootstrap, topic_name, b"small")
    assert not errors and [d.offset for d in delivered] == [0]


def test_limit_applies_to_compressed_batch_size(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, config={"max.message.bytes": TOPIC_LIMIT})
    value = b"a" * (TOPIC_LIMIT * 5)  # compresses to far below the limit
    delivered, errors = _produce_one(broker.bootstrap, topic_name, value,
                                     **{"compression.type": "gzip"})
    assert not errors and len(delivered) == 1
    (r,) = consume(broker.bootstrap, topic_name, 1, conf={"fetch.max.bytes": 4_000_000})
    assert r.value == value


def test_kafka_python_record_over_topic_limit_raises_message_size_too_large(broker, topic_name):
    from kafka.errors import MessageSizeTooLargeError
    create_topic(broker.bootstrap, topic_name, config={"max.message.bytes": TOPIC_LIMIT})
    ok = kp_produce(broker.bootstrap, topic_name, [{"value": _blob(TOPIC_LIMIT - SLACK)}],
                    **KP_BIG)
    assert [d.offset for d in ok] == [0]
    with pytest.raises(MessageSizeTooLargeError):
        kp_produce(broker.bootstrap, topic_name, [{"value": _blob(TOPIC_LIMIT + 1)}], **KP_BIG)


def test_broker_message_max_bytes_limits_topics_without_override(small_broker, topic_name):
    create_topic(small_broker.bootstrap, topic_name)
    delivered, errors = _produce_one(small_broker.bootstrap, topic_name,
                                     _blob(BROKER_LIMIT - SLACK))
    assert not errors and [d.offset for d in delivered] == [0]
    delivered, errors = _produce_one(small_broker.bootstrap, topic_name, _blob(BROKER_LIMIT + 1))
    assert not delivered
    assert [e.code() for e in errors] == [KafkaError.MSG_SIZE_TOO_LARGE]


def test_broker_message_max_bytes_is_the_topic_default_max_message_bytes(small_broker,
                                                                         topic_name):
    from confluent_kafka.admin import ConfigResource, ResourceType
    from helpers import admin
    create_topic(small_broker.bootstrap, topic_name)
    res = ConfigResource(ResourceType.TOPIC, topic_name)
    cfg = admin(small_broker.bootstrap).describe_configs([res])[res].result(timeout=30)
    assert cfg["max.message.bytes"].value == str(BROKER_LIMIT)


def test_topic_max_message_bytes_overrides_smaller_broker_limit(small_broker, topic_name):
    create_topic(small_broker.bootstrap, topic_name,
                 config={"max.message.bytes": BROKER_LIMIT * 3})
    value = _blob(BROKER_LIMIT * 2)
    delivered, errors = _produce_one(small_broker.bootstrap, topic_name, value)
    assert not errors and len(delivered) == 1
    (r,) = consume(small_broker.bootstrap, topic_name, 1, conf={"fetch.max.bytes": 4_000_000})
    assert r.value == value


# A v2 batch holding one record with a null key, no headers and an n-byte value
# (10_000 <= n < 2**20) is 61 (batch header) + 11 (record framing) + n bytes.
ONE_RECORD_BATCH_OVERHEAD = 72


def test_batch_exactly_at_max_message_bytes_is_accepted_one_byte_more_is_rejected(broker,
                                                                                  topic_name):
    create_topic(broker.bootstrap, topic_name, config={"max.message.bytes": TOPIC_LIMIT})
    at_limit = _blob(TOPIC_LIMIT - ONE_RECORD_BATCH_OVERHEAD)
    delivered, errors = _produce_one(broker.bootstrap, topic_name, at_limit)
    assert not errors and [d.offset for d in delivered] == [0]
    delivered, errors = _produce_one(broker.bootstrap, topic_name,
                                     _blob(TOPIC_LIMIT - ONE_RECORD_BATCH_OVERHEAD + 1))
    assert [e.code() for e in errors] == [KafkaError.MSG_SIZE_TOO_LARGE]
