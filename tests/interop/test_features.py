"""Feature versions (KIP-584): ApiVersions' supported and finalized features, UpdateFeatures
raw at v1 and v2, and Kafka's `kafka-features` tool. Every check holds on Strata and on
Kafka 4.4: both finalize the consumer group protocol (group.version 1) and transaction
version 2; the levels of other features differ, so those are checked only for their shape.
Changing a level is tested in test_transaction_version.py."""

from __future__ import annotations

import re
import struct
import subprocess

import pytest

import java_apps
from rawkafka import Conn, Reader, encode_compact_string

UPGRADE, SAFE_DOWNGRADE = 1, 2
INVALID_UPDATE_VERSION = 95
PREFIX = "The update failed for all features since the following feature had an error: "


def update_features(bootstrap: str, version: int, updates, validate_only: bool):
    """Raw UpdateFeatures v1/v2 -> (error_code, error_message, [(feature, code, message)])."""
    body = struct.pack(">i", 30_000) + bytes([len(updates) + 1])
    for feature, level, upgrade_type in updates:
        body += encode_compact_string(feature) + struct.pack(">hb", level, upgrade_type) + b"\x00"
    body += bytes([1 if validate_only else 0]) + b"\x00"
    with Conn(bootstrap) as conn:
        r = Reader(conn.request_flexible(57, version, body))
    r.int32()  # throttle
    code, message = r.int16(), r.compact_string()
    results = []
    if version < 2:
        for _ in range(r.uvarint() - 1):
            results.append((r.compact_string(), r.int16(), r.compact_string()))
            r.skip_tagged_fields()
    return code, message, results


def test_api_versions_reports_supported_and_finalized_features(broker):
    with Conn(broker.bootstrap) as conn:
        supported3, epoch3, finalized3 = conn.features(3)
        supported4, epoch4, finalized4 = conn.features(4)
    # Below v4 no supported feature with a zero minimum is listed (KIP-1022).
    assert all(lo > 0 for lo, _ in supported3.values()), supported3
    assert set(supported3) <= set(supported4)
    # Every finalized level is one the broker supports; the epoch says they are known.
    for name, (lo, hi) in finalized4.items():
        assert lo == hi and supported4[name][0] <= hi <= supported4[name][1], name
    assert finalized3 == finalized4 and epoch3 == epoch4 >= 0
    assert finalized4["group.version"] == (1, 1)
    assert finalized4["transaction.version"] == (2, 2)
    assert supported4["transaction.version"] == (0, 2)


@pytest.mark.parametrize("version", [1, 2])
def test_update_features_confirms_levels_in_force_and_refuses_others(broker, version):
    ok = update_features(broker.bootstrap, version, [("group.version", 1, UPGRADE)], False)
    assert ok[:2] == (0, None)
    assert ok[2] == ([("group.version", 0, "NONE")] if version < 2 else [])

    def refused(updates, reason):
        code, message, results = update_features(broker.bootstrap, version, updates, True)
        assert (code, results) == (INVALID_UPDATE_VERSION, []), message
        assert message.startswith(PREFIX) and reason in message, message

    refused([("group.version", 5, UPGRADE)],
            "Invalid update version 5 for feature group.version. Local controller")
    refused([("group.version", 5, UPGRADE)], "only supports versions")
    refused([("foo.version", 1, UPGRADE)], "does not support this feature.")
    refused([("group.version", 1, 0)], "The controller does not support the given upgrade type.")
    # One refused update fails the others in the request.
    refused([("group.version", 1, UPGRADE), ("foo.version", 1, UPGRADE)],
            "for feature foo.version.")


def test_kafka_features_tool_describes_and_refuses_an_unsupported_upgrade(broker):
    cp, why = java_apps.classpath("tools")
    if cp is None:
        pytest.skip(f"Kafka tools jars: {why}")

    def kafka_features(*args):
        cmd = [java_apps._java_bin(), *java_apps.JVM_OPTS, "-cp", cp,
               "org.apache.kafka.tools.FeatureCommand", "--bootstrap-server", broker.bootstrap,
               *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL)

    out = kafka_features("describe")
    assert out.returncode == 0, out.stderr[-3000:]
    rows = {}
    for line in out.stdout.splitlines():
        # "Feature: group.version   SupportedMinVersion: 0   ...   Epoch: 20"
        fields = dict(re.findall(r"(\w+): (\S+)", line))
        if "Feature" in fields:
            rows[fields["Feature"]] = fields
    assert rows["group.version"]["FinalizedVersionLevel"] == "1", out.stdout
    assert "transaction.version" in rows, out.stdout
    bad = kafka_features("upgrade", "--feature", "group.version=7")
    assert bad.returncode != 0
    assert "group.version" in bad.stdout + bad.stderr
