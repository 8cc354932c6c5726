"""A TLS listener's keystore replaced at run time (Kafka's dynamic SSL reconfiguration,
KIP-226): IncrementalAlterConfigs sets `listener.name.<l>.ssl.keystore.location` on the
broker, and connections accepted from then on get the new certificate, with no restart.
As Kafka does by default, a certificate naming another subject is refused, and so is a
keystore that does not load; the listener keeps serving the certificate in force.

Runs on both targets (the reference Kafka broker is started with the same PEM keystore)."""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from conftest import free_port
from helpers import QUIET, admin
from test_group_configs import inc_alter

BROKER = 4
SET = 0
INVALID_REQUEST = 42

pytest.importorskip("cryptography", reason="the `cryptography` package generates the "
                    "test certificates (pip install -r tests/interop/requirements.txt)")


def _issue(d: Path, ca_name: str = "Reload CA"):
    """A CA and a function that writes a server keystore (key + chain) signed by it."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def name(cn):
        return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Strata Test"),
                          x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca = (x509.CertificateBuilder().subject_name(name(ca_name)).issuer_name(name(ca_name))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(hours=1))
          .not_valid_after(now + datetime.timedelta(days=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    ca_pem = ca.public_bytes(serialization.Encoding.PEM)
    (d / "ca.pem").write_bytes(ca_pem)

    def keystore(file: str, cn: str = "localhost") -> tuple[Path, int]:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        serial = x509.random_serial_number()
        cert = (x509.CertificateBuilder().subject_name(name(cn)).issuer_name(name(ca_name))
                .public_key(key.public_key()).serial_number(serial)
                .not_valid_before(now - datetime.timedelta(hours=1))
                .not_valid_after(now + datetime.timedelta(days=2))
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                    critical=False)
                .sign(ca_key, hashes.SHA256()))
        path = d / file
        path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption())
                         + cert.public_bytes(serialization.Encoding.PEM) + ca_pem)
        return path, serial

    return d / "ca.pem", keystore


def served_serial(port: int, ca: Path) -> int:
    """The serial number of the certificate a new TLS connection to the listener gets."""
    from cryptography import x509

    ctx = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
            der = tls.getpeercert(binary_form=True)
    return x509.load_der_x509_certificate(der).serial_number


def test_a_listeners_keystore_is_replaced_at_run_time(broker_factory, tmp_path):
    ca, keystore = _issue(tmp_path)
    first, first_serial = keystore("server-1.pem")
    b = broker_factory(start=False, name="tls-reload")
    port = free_port()
    listeners = f"PLAINTEXT://127.0.0.1:{b.port},SSL://127.0.0.1:{port}"
    b.props.update({
        "listeners": listeners,
        "advertised.listeners": listeners,
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL",
        "listener.name.ssl.ssl.keystore.type": "PEM",
        "listener.name.ssl.ssl.keystore.location": str(first),
    })
    b.start()
    me = str(next(iter(admin(b.bootstrap).list_topics(timeout=30).brokers)))
    assert served_serial(port, ca) == first_serial

    def alter(path: Path):
        return inc_alter(b.bootstrap, me, [("listener.name.ssl.ssl.keystore.location", SET,
                                            str(path))], rtype=BROKER)

    def serves(serial: int, timeout: float = 15.0) -> bool:
        # Kafka applies the update when its metadata record reaches the broker.
        deadline = time.monotonic() + timeout
        while served_serial(port, ca) != serial:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)
        return True

    # A renewed certificate (same subject and names, new key): served from now on.
    renewed, renewed_serial = keystore("server-2.pem")
    assert alter(renewed) == (0, None)
    assert serves(renewed_serial)

    # Another subject: refused, as Kafka refuses it by default.
    other, _ = keystore("server-other.pem", cn="somebody-else")
    err, msg = alter(other)
    assert err == INVALID_REQUEST and "DistinguishedName" in (msg or ""), (err, msg)
    # A keystore that does not load: refused.
    broken = tmp_path / "broken.pem"
    broken.write_text("not a keystore\n")
    err, msg = alter(broken)
    assert err == INVALID_REQUEST, (err, msg)
    time.sleep(1)
    assert served_serial(port, ca) == renewed_serial

    # The same file name again, rewritten with a renewed certificate: reloaded (Kafka
    # reloads a keystore whose file changed when its setting is set again).
    again, again_serial = keystore("server-2.pem")
    assert again == renewed
    assert alter(renewed) == (0, None)
    assert serves(again_serial)

    # And clients work over it.
    topic = "tls-reload"
    ssl_conf = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SSL",
                "ssl.ca.location": str(ca), **QUIET}
    p = Producer({**ssl_conf, "acks": "all"})
    for i in range(10):
        p.produce(topic, value=b"%d" % i, partition=0)
    assert p.flush(30) == 0
    c = Consumer({**ssl_conf, "group.id": "tls-reload", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 10 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(int(m.value()))
    finally:
        c.close()
    assert got == list(range(10))
