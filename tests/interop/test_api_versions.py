"""ApiVersions compared with Apache Kafka 4.4's: every API Kafka 4.4 advertises that Strata
does not, and every version range that differs, must be one of the documented exceptions
below (the README's compatibility table says why). On the Kafka target the same test checks
that the reference broker still advertises exactly the table written here."""

from __future__ import annotations

from conftest import TARGET
from rawkafka import Conn

# ApiVersions of the reference Kafka 4.4 broker (KRaft, broker and controller): key -> range.
KAFKA_4_4 = {
    0: (0, 13), 1: (4, 18), 2: (1, 11), 3: (0, 13), 8: (2, 10), 9: (1, 10), 10: (0, 6),
    11: (0, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5), 15: (0, 6), 16: (0, 5), 17: (0, 1),
    18: (0, 5), 19: (2, 7), 20: (1, 6), 21: (0, 2), 22: (0, 5), 23: (2, 4), 24: (0, 5),
    25: (0, 4), 26: (0, 5), 27: (1, 2), 28: (0, 6), 29: (1, 3), 30: (1, 3), 31: (1, 3),
    32: (1, 4), 33: (0, 2), 34: (1, 2), 35: (1, 5), 36: (0, 2), 37: (0, 3), 38: (1, 3),
    39: (1, 2), 40: (1, 2), 41: (1, 3), 42: (0, 3), 43: (0, 2), 44: (0, 1), 45: (0, 1),
    46: (0, 0), 47: (0, 0), 48: (0, 1), 49: (0, 1), 50: (0, 0), 51: (0, 0), 55: (0, 2),
    57: (0, 2), 60: (0, 2), 61: (0, 0), 64: (0, 0), 65: (0, 0), 66: (0, 2), 68: (0, 1),
    69: (0, 1), 74: (0, 1), 75: (0, 0), 76: (1, 1), 77: (1, 1), 78: (1, 2), 79: (1, 2),
    80: (0, 1), 81: (0, 0), 83: (0, 0), 84: (0, 0), 85: (0, 1), 86: (0, 0), 87: (0, 1),
    88: (0, 1), 89: (0, 1), 90: (0, 1), 91: (0, 0), 92: (0, 0), 93: (0, 0), 94: (0, 0),
}

# APIs Kafka 4.4 advertises and Strata does not serve (README: "Not served").
NOT_SERVED = {
    88: "StreamsGroupHeartbeat",
    89: "StreamsGroupDescribe",
    93: "StreamsGroupTopologyDescriptionUpdate",
    94: "UnregisterController",
}

# Served with a narrower range than Kafka's (README's table says why).
NARROWER = {
    0: (3, 13),   # Produce: RecordBatch v2 only (v0-v2 carry message sets v0/v1)
    17: (1, 1),   # SaslHandshake: v0 (SASL without SaslAuthenticate framing) is not served
}


def test_api_versions_differ_from_kafka_4_4_only_where_documented(broker):
    with Conn(broker.bootstrap) as c:
        advertised = c.api_versions()
    if TARGET == "kafka":
        assert advertised == KAFKA_4_4
        return
    missing = {k: NOT_SERVED.get(k, "?") for k in KAFKA_4_4 if k not in advertised}
    assert missing == NOT_SERVED
    assert not [k for k in advertised if k not in KAFKA_4_4], "APIs Kafka 4.4 does not have"
    differ = {k: advertised[k] for k in advertised if advertised[k] != KAFKA_4_4[k]}
    assert differ == NARROWER
