"""AddRaftVoter and RemoveRaftVoter (KIP-853) refused as Kafka 4.4 refuses them, sent raw to
a single node, which is its own quorum of one voter (the reference Kafka is formatted with
--standalone, so its kraft.version is 1 and voter changes are allowed): the node's own id is
DUPLICATE_VOTER, a node that is not an observer REQUEST_TIMED_OUT, a zero directory id
INVALID_REQUEST, another cluster's id INCONSISTENT_CLUSTER_ID, and removing a voter that is
not there, or the last one, VOTER_NOT_FOUND. Both targets.

The voter changes themselves, on a running cluster, are in test_cluster_quorum.py."""

from __future__ import annotations

import os
import struct

import pytest

from rawkafka import Conn, Reader, encode_compact_string, encode_uvarint

ADD_RAFT_VOTER = 80
REMOVE_RAFT_VOTER = 81
REQUEST_TIMED_OUT = 7
INVALID_REQUEST = 42
INCONSISTENT_CLUSTER_ID = 104
DUPLICATE_VOTER = 126
VOTER_NOT_FOUND = 127


def answer(body: bytes) -> tuple[int, str | None]:
    r = Reader(body)
    r.int32()  # throttle_time_ms
    return r.int16(), r.compact_string()


def add_voter(conn, version, cluster_id, voter_id, directory_id, listeners, timeout_ms=3000,
              ack_when_committed=True):
    body = encode_compact_string(cluster_id) + struct.pack(">ii", timeout_ms, voter_id)
    body += directory_id + encode_uvarint(len(listeners) + 1)
    for name, host, port in listeners:
        body += encode_compact_string(name) + encode_compact_string(host)
        body += struct.pack(">H", port) + b"\x00"
    if version >= 1:
        body += b"\x01" if ack_when_committed else b"\x00"
    return answer(conn.request_flexible(ADD_RAFT_VOTER, version, body + b"\x00"))


def remove_voter(conn, cluster_id, voter_id, directory_id):
    body = encode_compact_string(cluster_id) + struct.pack(">i", voter_id) + directory_id
    return answer(conn.request_flexible(REMOVE_RAFT_VOTER, 0, body + b"\x00"))


@pytest.mark.timeout(120)
def test_voter_changes_on_a_single_node_are_refused_with_kafkas_codes(broker):
    with Conn(broker.bootstrap) as conn:
        cluster_id = conn.describe_cluster_id()
        node_id = conn.describe_cluster_controller()
        directory = os.urandom(16)
        # Kafka needs an endpoint for its controller listener; Strata takes any.
        closed = [("CONTROLLER", "127.0.0.1", 1)]
        for version in (0, 1):
            code, message = add_voter(conn, version, cluster_id, node_id, directory, closed)
            assert code == DUPLICATE_VOTER, (version, code, message)
            code, message = add_voter(conn, version, cluster_id, 9, directory, closed)
            assert code == REQUEST_TIMED_OUT, (version, code, message)
            code, message = add_voter(conn, version, cluster_id, 9, bytes(16), closed)
            assert code == INVALID_REQUEST, (version, code, message)
            code, message = add_voter(conn, version, "another-cluster", 9, directory, closed)
            assert code == INCONSISTENT_CLUSTER_ID, (version, code, message)
        code, message = add_voter(conn, 1, cluster_id, node_id, directory, closed,
                                  ack_when_committed=False)
        assert code == DUPLICATE_VOTER, (code, message)

        code, message = remove_voter(conn, cluster_id, 9, directory)
        assert code == VOTER_NOT_FOUND, (code, message)
        # The only voter, by any directory id: the quorum would be left without one.
        code, message = remove_voter(conn, cluster_id, node_id, directory)
        assert code == VOTER_NOT_FOUND, (code, message)
        code, message = remove_voter(conn, "another-cluster", node_id, directory)
        assert code == INCONSISTENT_CLUSTER_ID, (code, message)
        # The connection is still served.
        assert conn.describe_cluster_id() == cluster_id
