"""A tiny hand-written Kafka wire-protocol client for the few requests that the
high-level clients never send as-is (e.g. a Fetch for a topic that does not
exist, or at an offset out of range). Only non-flexible versions are used.
"""

from __future__ import annotations

import socket
import struct

API_FETCH = 1
API_METADATA = 3
API_VERSIONS = 18
API_DESCRIBE_CLUSTER = 60


def encode_uvarint(n: int) -> bytes:
    """Kafka's unsigned varint (lengths and counts of flexible versions)."""
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if not n:
            out.append(b)
            return bytes(out)
        out.append(b | 0x80)


def encode_compact_string(s: str | None) -> bytes:
    """A compact (nullable) string of flexible versions."""
    if s is None:
        return b"\x00"
    b = s.encode()
    return encode_uvarint(len(b) + 1) + b


class Conn:
    def __init__(self, bootstrap: str, timeout: float = 30.0):
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.corr = 0

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("connection closed by broker")
            buf += chunk
        return bytes(buf)

    def request(self, api_key: int, version: int, body: bytes) -> bytes:
        """Send a request with header v1 and return the response body (after header v0)."""
        self.corr += 1
        client_id = b"strata-interop-raw"
        header = struct.pack(">hhih", api_key, version, self.corr, len(client_id)) + client_id
        msg = header + body
        self.sock.sendall(struct.pack(">i", len(msg)) + msg)
        (size,) = struct.unpack(">i", self._recv_exact(4))
        data = self._recv_exact(size)
        (corr,) = struct.unpack(">i", data[:4])
        assert corr == self.corr, f"correlation id {corr} != {self.corr}"
        return data[4:]

    def request_flexible(self, api_key: int, version: int, body: bytes) -> bytes:
        """Send a request with header v2 (flexible versions) and return the response body
        (after header v1)."""
        self.corr += 1
        client_id = b"strata-interop-raw"
        header = struct.pack(">hhih", api_key, version, self.corr, len(client_id)) + client_id
        msg = header + b"\x00" + body  # no tagged fields
        self.sock.sendall(struct.pack(">i", len(msg)) + msg)
        (size,) = struct.unpack(">i", self._recv_exact(4))
        r = Reader(self._recv_exact(size))
        corr = r.int32()
        assert corr == self.corr, f"correlation id {corr} != {self.corr}"
        r.skip_tagged_fields()
        return r.d[r.i:]

    # ------------------------------------------------------------------ requests
    def metadata_v1(self, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
        """Metadata v1 for one topic, answered by this broker (a high-level client may ask
        any broker it knows) -> {partition: (leader, replicas, isr)}."""
        t = topic.encode()
        body = struct.pack(">i", 1) + struct.pack(">h", len(t)) + t
        r = Reader(self.request(API_METADATA, 1, body))
        for _ in range(r.int32()):  # brokers
            r.int32(), r.string(), r.int32(), r.string()
        r.int32()  # controller_id
        out = {}
        for _ in range(r.int32()):
            err, name = r.int16(), r.string()
            r.int8()  # is_internal
            for _ in range(r.int32()):
                perr, index, leader = r.int16(), r.int32(), r.int32()
                replicas = [r.int32() for _ in range(r.int32())]
                isr = [r.int32() for _ in range(r.int32())]
                if name == topic and err == 0 and perr == 0:
                    out[index] = (leader, replicas, isr)
        return out

    def describe_cluster_controller(self) -> int:
        """DescribeCluster v0 (API 60) -> controller_id (-1: none known).

        librdkafka's describe_cluster() answers from a Metadata request; this is the
        DescribeCluster API itself."""
        r = Reader(self.request_flexible(API_DESCRIBE_CLUSTER, 0, b"\x00\x00"))
        r.int32()  # throttle_time_ms
        err = r.int16()
        assert err == 0, f"DescribeCluster error {err}"
        r.compact_string()  # error_message
        r.compact_string()  # cluster_id
        return r.int32()

    def metadata_cluster_id(self) -> str | None:
        """Metadata v2 for no topic -> cluster_id, as this broker answers it."""
        r = Reader(self.request(API_METADATA, 2, struct.pack(">i", 0)))
        for _ in range(r.int32()):  # brokers
            r.int32(), r.string(), r.int32(), r.string()
        return r.string()

    def describe_cluster_id(self) -> str:
        """DescribeCluster v0 (API 60) -> cluster_id, as this broker answers it."""
        r = Reader(self.request_flexible(API_DESCRIBE_CLUSTER, 0, b"\x00\x00"))
        r.int32()  # throttle_time_ms
        err = r.int16()
        assert err == 0, f"DescribeCluster error {err}"
        r.compact_string()  # error_message
        return r.compact_string()

    def api_versions(self) -> dict[int, tuple[int, int]]:
        """ApiVersions v0 -> {api_key: (min, max)}."""
        r = Reader(self.request(API_VERSIONS, 0, b""))
        err = r.int16()
        assert err == 0, f"ApiVersions error {err}"
        out = {}
        for _ in range(r.int32()):
            k, lo, hi = r.int16(), r.int16(), r.int16()
            out[k] = (lo, hi)
        return out

    def api_versions_v5(self, cluster_id: str | None, node_id: int):
        """ApiVersions v5 naming the cluster and node the client means to reach ->
        (error_code, {api_key: (min, max)}). Its response header is v0, as for every
        ApiVersions version."""
        self.corr += 1
        client_id = b"strata-interop-raw"
        header = struct.pack(">hhih", API_VERSIONS, 5, self.corr, len(client_id)) + client_id
        header += b"\x00"  # request header v2: no tagged fields
        body = encode_compact_string("strata-interop") + encode_compact_string("1")
        body += encode_compact_string(cluster_id)
        body += struct.pack(">i", node_id) + b"\x00"
        msg = header + body
        self.sock.sendall(struct.pack(">i", len(msg)) + msg)
        (size,) = struct.unpack(">i", self._recv_exact(4))
        r = Reader(self._recv_exact(size))
        assert r.int32() == self.corr
        err = r.int16()
        out = {}
        for _ in range(r.uvarint() - 1):
            k, lo, hi = r.int16(), r.int16(), r.int16()
            r.skip_tagged_fields()
            out[k] = (lo, hi)
        return err, out

    def features(self, version: int = 4):
        """ApiVersions v3 or v4 -> (supported {feature: (min, max)}, finalized epoch,
        finalized {feature: (min level, max level)}), from the response's tagged fields."""
        self.corr += 1
        client_id = b"strata-interop-raw"
        header = struct.pack(">hhih", API_VERSIONS, version, self.corr, len(client_id))
        header += client_id
        body = b"\x00" + b"\x0fstrata-interop" + b"\x021" + b"\x00"
        msg = header + body
        self.sock.sendall(struct.pack(">i", len(msg)) + msg)
        (size,) = struct.unpack(">i", self._recv_exact(4))
        r = Reader(self._recv_exact(size))
        assert r.int32() == self.corr
        assert r.int16() == 0, "ApiVersions error"
        for _ in range(r.uvarint() - 1):
            r.int16(), r.int16(), r.int16()
            r.skip_tagged_fields()
        r.int32()  # throttle
        supported, epoch, finalized = {}, -1, {}
        for _ in range(r.uvarint()):
            tag, size = r.uvarint(), r.uvarint()
            end = r.i + size
            if tag == 0:
                for _ in range(r.uvarint() - 1):
                    name = r.compact_string()
                    supported[name] = (r.int16(), r.int16())
                    r.skip_tagged_fields()
            elif tag == 1:
                epoch = r.int64()
            elif tag == 2:
                for _ in range(r.uvarint() - 1):
                    name = r.compact_string()
                    hi, lo = r.int16(), r.int16()
                    finalized[name] = (lo, hi)
                    r.skip_tagged_fields()
            r.i = end
        return supported, epoch, finalized

    def fetch_v4(self, topic: str, partition: int, offset: int, max_wait_ms: int = 0,
                 min_bytes: int = 1, max_bytes: int = 1 << 20):
        """Fetch v4 for one partition -> (error_code, high_watermark, records_bytes)."""
        t = topic.encode()
        body = struct.pack(">iiiib", -1, max_wait_ms, min_bytes, max_bytes, 0)
        body += struct.pack(">i", 1) + struct.pack(">h", len(t)) + t
        body += struct.pack(">i", 1) + struct.pack(">iqi", partition, offset, max_bytes)
        r = Reader(self.request(API_FETCH, 4, body))
        r.int32()  # throttle_time_ms
        result = None
        for _ in range(r.int32()):
            name = r.string()
            for _ in range(r.int32()):
                pidx, err, hw = r.int32(), r.int16(), r.int64()
                r.int64()  # last_stable_offset
                n_aborted = r.int32()
                for _ in range(max(n_aborted, 0)):
                    r.int64(), r.int64()
                records = r.nbytes()
                if name == topic and pidx == partition:
                    result = (err, hw, records)
        assert result is not None, "partition missing from Fetch response"
        return result


class Reader:
    def __init__(self, data: bytes):
        self.d = data
        self.i = 0

    def _take(self, fmt: str):
        size = struct.calcsize(fmt)
        (v,) = struct.unpack_from(fmt, self.d, self.i)
        self.i += size
        return v

    def int16(self):
        return self._take(">h")

    def int32(self):
        return self._take(">i")

    def int64(self):
        return self._take(">q")

    def int8(self):
        return self._take(">b")

    def string(self):
        n = self.int16()
        if n < 0:
            return None
        s = self.d[self.i:self.i + n].decode()
        self.i += n
        return s

    def uvarint(self):
        shift = value = 0
        while True:
            b = self.d[self.i]
            self.i += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7

    def compact_string(self):
        n = self.uvarint() - 1
        if n < 0:
            return None
        s = self.d[self.i:self.i + n].decode()
        self.i += n
        return s

    def skip_tagged_fields(self):
        for _ in range(self.uvarint()):
            self.uvarint()
            self.i += self.uvarint()

    def nbytes(self):
        n = self.int32()
        if n < 0:
            return None
        b = self.d[self.i:self.i + n]
        self.i += n
        return b
