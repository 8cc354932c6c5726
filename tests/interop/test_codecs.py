"""Every compression codec: records produced compressed come back byte-exact, to
both client libraries (so each library decodes the other's batches)."""

import random
import struct
from pathlib import Path

import pytest

from helpers import consume, create_topic, kp_consume, kp_produce, kp_require_codec, produce

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
# The codec ids of a RecordBatch's attributes (the low 3 bits).
CODEC_IDS = {codec: i for i, codec in enumerate(CODECS)}


def payloads(seed: int, n: int = 150):
    """Deterministic mix: incompressible, highly compressible, empty, null and large values."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        kind = i % 6
        if kind == 0:
            v = rnd.randbytes(rnd.randint(1, 4000))
        elif kind == 1:
            v = (b"strata-%d-" % i) * rnd.randint(1, 3000)
        elif kind == 2:
            v = b""
        elif kind == 3:
            v = None  # tombstone
        elif kind == 4:
            v = bytes(range(256)) * 4
        else:
            v = rnd.randbytes(100_000) if i % 30 == 5 else rnd.randbytes(10)
        key = None if i % 4 == 0 else (b"" if i % 4 == 1 else b"key-%d" % i)
        out.append({"key": key, "value": v})
    return out


def _check(records, got):
    assert len(got) == len(records), f"expected {len(records)} records, got {len(got)}"
    assert [r.offset for r in got] == list(range(len(records)))
    for want, r in zip(records, got):
        assert r.value == want["value"], f"value mismatch at offset {r.offset}"
        assert r.key == want["key"], f"key mismatch at offset {r.offset}"


def _partition_dir(broker, topic: str, partition: int) -> Path:
    if broker.target == "kafka":
        # scripts/kafka-ref.sh: log.dirs=<dir>/data, Kafka's <topic>-<partition> layout.
        return broker.dir / "data" / f"{topic}-{partition}"
    return broker.partition_dir(topic, partition)


def _stored_batches(partition_dir: Path) -> list[tuple[int, int, int]]:
    """(base offset, record count, codec id) of every RecordBatch in the partition's segment
    files, in offset order. Header: baseOffset int64, batchLength int32, partitionLeaderEpoch
    int32, magic int8, crc int32, attributes int16 (codec in the low 3 bits), lastOffsetDelta
    int32."""
    batches = []
    for segment in sorted(partition_dir.glob("*.log")):
        data = segment.read_bytes()
        pos = 0
        while pos < len(data):
            assert len(data) - pos >= 27, f"{segment}: truncated batch header at byte {pos}"
            base_offset, batch_length = struct.unpack_from(">qi", data, pos)
            magic = data[pos + 16]
            (attributes,) = struct.unpack_from(">h", data, pos + 21)
            (last_offset_delta,) = struct.unpack_from(">i", data, pos + 23)
            assert magic == 2, f"{segment}: batch at {base_offset} has magic {magic}"
            assert pos + 12 + batch_length <= len(data), f"{segment}: truncated batch"
            batches.append((base_offset, last_offset_delta + 1, attributes & 0x7))
            pos += 12 + batch_length
    return batches


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_produced_codec_roundtrips_byte_exact_to_both_clients(broker, topic_name, codec):
    kp_require_codec(codec)  # kafka-python consumes these batches too
    create_topic(broker.bootstrap, topic_name, partitions=1)
    records = payloads(seed=len(codec))
    delivered, _ = produce(broker.bootstrap, topic_name, records,
                           conf={"compression.type": codec, "linger.ms": 20})
    assert sorted(d.offset for d in delivered) == list(range(len(records)))

    _check(records, consume(broker.bootstrap, topic_name, len(records)))
    _check(records, kp_consume(broker.bootstrap, topic_name, len(records)))


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_produced_codec_roundtrips_byte_exact_to_both_clients(broker, topic_name,
                                                                           codec):
    kp_require_codec(codec)
    create_topic(broker.bootstrap, topic_name, partitions=1)
    records = payloads(seed=100 + len(codec), n=90)
    kw = {} if codec == "none" else {"compression_type": codec}
    delivered = kp_produce(broker.bootstrap, topic_name, records, linger_ms=20, **kw)
    assert sorted(d.offset for d in delivered) == list(range(len(records)))

    _check(records, kp_consume(broker.bootstrap, topic_name, len(records)))
    _check(records, consume(broker.bootstrap, topic_name, len(records)))


@pytest.mark.parametrize("topic_codec", ["gzip", "zstd"])
def test_topic_compression_type_recompresses_and_values_stay_byte_exact(broker, topic_name,
                                                                        topic_codec):
    # compression.type on the topic makes the broker (re)compress; consumers see the same bytes.
    kp_require_codec(topic_codec)
    create_topic(broker.bootstrap, topic_name, partitions=1,
                 config={"compression.type": topic_codec})
    records = payloads(seed=7, n=60)
    produce(broker.bootstrap, topic_name, records, conf={"compression.type": "lz4"})
    _check(records, consume(broker.bootstrap, topic_name, len(records)))
    _check(records, kp_consume(broker.bootstrap, topic_name, len(records)))
    # Every stored batch carries the topic's codec, not the producer's lz4, and together the
    # batches hold every record.
    batches = _stored_batches(_partition_dir(broker, topic_name, 0))
    next_offset = 0
    for base_offset, count, codec in batches:
        assert base_offset == next_offset, batches
        assert codec == CODEC_IDS[topic_codec], \
            f"batch at offset {base_offset} stored with codec id {codec}: {batches}"
        next_offset += count
    assert next_offset == len(records), batches


def test_mixed_codecs_in_one_partition_are_all_readable(broker, topic_name):
    for codec in CODECS:
        kp_require_codec(codec)
    create_topic(broker.bootstrap, topic_name, partitions=1)
    records = []
    for i, codec in enumerate(CODECS * 2):
        batch = [{"key": b"%s-%d" % (codec.encode(), j), "value": b"v" * (j * 100 + i)}
                 for j in range(10)]
        produce(broker.bootstrap, topic_name, batch, conf={"compression.type": codec})
        records.extend(batch)
    _check(records, consume(broker.bootstrap, topic_name, len(records)))
    _check(records, kp_consume(broker.bootstrap, topic_name, len(records)))
