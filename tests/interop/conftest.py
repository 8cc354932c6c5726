"""Fixtures for Strata's interop suite.

Every test runs against one broker implementation, chosen with the environment
variable ``STRATA_TEST_TARGET``:

* ``strata`` (default): the Strata binary at ``$STRATA_BIN`` (default
  ``target/debug/strata`` relative to the repo root), started as
  ``strata serve --config <generated server.properties>``.
* ``kafka``: a reference Apache Kafka broker started with
  ``scripts/kafka-ref.sh start <port> <dir>``.

Fixtures:

* ``broker`` (session scope): the shared default broker. Tests that only create
  their own uniquely-named topics use it.
* ``broker_factory`` (function scope): ``broker_factory(props={...})`` starts a
  dedicated broker with extra server properties; it is stopped when the test ends.
* ``module_broker_factory``: same, but the brokers live until the module ends.
* ``s3_server`` (module scope): a moto S3 server on a free port with a fresh
  bucket, for the tiered-storage tests (skips when moto_server is not installed).

Every broker object exposes ``.bootstrap``, ``.start()``, ``.stop()``,
``.kill9()``, ``.restart()``, ``.log_tail()`` and ``.data_dir`` (its log dir); a
Strata broker also ``.partition_dir(topic, partition)``. All brokers are stopped
in finalizers, also when a test fails.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

REPO_ROOT = HERE.parents[1]
TARGET = os.environ.get("STRATA_TEST_TARGET", "strata").strip().lower() or "strata"
if TARGET not in ("strata", "kafka"):
    raise pytest.UsageError(
        f"STRATA_TEST_TARGET must be 'strata' or 'kafka', not {TARGET!r}")

STRATA_CACHE = Path(os.environ.get("STRATA_CACHE") or (Path.home() / ".cache" / "strata"))
KAFKA_REF = REPO_ROOT / "scripts" / "kafka-ref.sh"

# Server properties every broker gets (same names for Strata and Kafka).
# num.partitions=2 lets tests tell an auto-created topic's partition count
# apart from the hard-wired Kafka default of 1.
BASE_PROPS = {
    "auto.create.topics.enable": "true",
    "num.partitions": "2",
}

# Extra properties only given to the reference Kafka broker (kafka-ref.sh already
# sets the single-node replication factors), to keep it frugal. They do not
# change any behaviour that the tests assert.
KAFKA_ONLY_PROPS = {
    "num.network.threads": "2",
    "num.io.threads": "2",
    # Kafka waits 30 s before the first retention check; Strata has no such delay.
    "log.initial.task.delay.ms": "0",
}

START_TIMEOUT_S = float(os.environ.get("STRATA_TEST_START_TIMEOUT", "120"))
STOP_TIMEOUT_S = 60.0


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (picked by binding port 0), never one this session
    handed out before: the kernel may offer a released port again, and two listeners of one
    broker (its Kafka and admin ports, say) then collide when it starts."""
    for _ in range(1000):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port
    raise RuntimeError("no free port that this session has not handed out already")


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _tail(path: Path, lines: int = 60) -> str:
    try:
        data = path.read_bytes()
    except OSError as e:
        return f"<no log at {path}: {e}>"
    text = data[-200_000:].decode("utf-8", "replace")
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)  # drop ANSI colours
    return "\n".join(text.splitlines()[-lines:])


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except OSError:
        return False


class BrokerStartError(RuntimeError):
    pass


class Broker:
    """A broker under test. Subclasses implement _start/_stop/_kill."""

    target = "?"

    def __init__(self, workdir: Path, props: dict[str, str] | None = None, name: str = "broker"):
        self.name = name
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.props = dict(BASE_PROPS)
        self.props.update({k: str(v) for k, v in (props or {}).items()})
        self.port = free_port()
        self.running = False
        # The address clients reach the broker at (a test may put it in a network namespace).
        self.host = "127.0.0.1"

    # -- public API ---------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> "Broker":
        if self.running:
            return self
        _LIVE_BROKERS.add(self)
        self._start()
        self.running = True
        try:
            self._wait_for_metadata()
        except Exception:
            self.running = False
            self._kill()
            raise
        return self

    def stop(self) -> None:
        """Clean shutdown (SIGTERM for Strata, kafka-ref.sh stop for Kafka)."""
        if not self.running:
            return
        self.running = False
        self._stop()
        _LIVE_BROKERS.discard(self)

    def kill9(self) -> None:
        """Crash the broker with SIGKILL (no clean shutdown)."""
        if not self.running:
            return
        self.running = False
        self._kill()
        _LIVE_BROKERS.discard(self)

    def restart(self) -> "Broker":
        self.stop()
        return self.start()

    def log_tail(self, lines: int = 60) -> str:
        return _tail(self.log_path, lines)

    @property
    def log_path(self) -> Path:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} {self.bootstrap} props={self.props}>"

    # -- helpers ------------------------------------------------------------
    def _fail(self, msg: str) -> BrokerStartError:
        return BrokerStartError(
            f"{self.target} broker {self.name!r} failed to start: {msg}\n"
            f"props: {self.props}\n"
            f"--- log tail ({self.log_path}) ---\n{self.log_tail()}")

    def _wait_for_metadata(self) -> None:
        """Wait until a Kafka client gets metadata listing this broker."""
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + START_TIMEOUT_S
        admin = AdminClient({"bootstrap.servers": self.bootstrap,
                             "allow.auto.create.topics": False,
                             "log_level": 0})
        last = None
        while time.monotonic() < deadline:
            try:
                md = admin.list_topics(timeout=5)
                if md.brokers:
                    return
            except Exception as e:  # noqa: BLE001 - keep polling
                last = e
            self._check_alive()
            time.sleep(0.3)
        raise self._fail(f"no metadata from {self.bootstrap} within {START_TIMEOUT_S}s ({last})")

    def _exit_status(self) -> str | None:
        """None while the process runs, else how it ended."""
        return None

    def _check_alive(self) -> None:
        status = self._exit_status()
        if status is not None:
            raise self._fail(status)

    def died(self) -> str | None:
        """If the broker should be running but its process is gone, say how it ended."""
        return self._exit_status() if self.running else None


# Every broker process this session started, for the last-resort cleanup below.
_LIVE_BROKERS: "set[Broker]" = set()


def _cleanup_at_exit() -> None:
    for b in list(_LIVE_BROKERS):
        try:
            b._kill()
        except Exception:  # noqa: BLE001
            pass


atexit.register(_cleanup_at_exit)


def _on_sigterm(signum, frame):
    # Turn SIGTERM into KeyboardInterrupt so that pytest runs the finalizers that
    # stop the brokers.
    raise KeyboardInterrupt(f"signal {signum}")


if threading.current_thread() is threading.main_thread():
    signal.signal(signal.SIGTERM, _on_sigterm)


try:  # loaded up front: nothing may be imported between fork and exec
    import ctypes
    _LIBC = ctypes.CDLL("libc.so.6", use_errno=True)
except OSError:
    _LIBC = None


def _parent_death_signal():  # runs in the child between fork and exec
    if _LIBC is not None:
        _LIBC.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: stop with the parent


class StrataBroker(Broker):
    target = "strata"

    def __init__(self, workdir, props=None, name="broker"):
        super().__init__(workdir, props, name)
        self.admin_port = free_port()
        self.data_dir = self.workdir / "data"
        self.data_dir.mkdir(exist_ok=True)
        self.config_path = self.workdir / "server.properties"
        self.proc: subprocess.Popen | None = None
        self._log_file = None
        self.binary = Path(os.environ.get("STRATA_BIN", "target/debug/strata"))
        if not self.binary.is_absolute():
            self.binary = REPO_ROOT / self.binary
        # Runs the broker through e.g. `ip netns exec <ns>` (which execs it: same pid).
        self.command_prefix: list[str] = []

    @property
    def log_path(self) -> Path:
        return self.workdir / "strata.log"

    def metric(self, name: str, labels: str = "") -> float:
        """One series' value on the broker's admin ``/metrics`` (``labels`` as written there,
        e.g. ``'{topic="t",partition="0"}'``; empty for an unlabelled metric)."""
        url = f"http://{self.host}:{self.admin_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as resp:
            text = resp.read().decode()
        m = re.search(rf"^{re.escape(name + labels)} ([0-9.e+-]+)$", text, re.MULTILINE)
        assert m, f"no {name}{labels} in {url}"
        return float(m.group(1))

    def partition_dir(self, topic: str, partition: int) -> Path:
        """The partition's directory in the (single) log dir: ``<data>/<topic>-<partition>``."""
        return self.data_dir / f"{topic}-{partition}"

    def _write_config(self) -> None:
        props = {
            "listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "log.dirs": str(self.data_dir),
            "strata.admin.listener": f"{self.host}:{self.admin_port}",
        }
        props.update(self.props)
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    def _start(self) -> None:
        if not self.binary.exists():
            pytest.fail(f"Strata binary not found at {self.binary}; build it with `cargo build` "
                        f"or set STRATA_BIN (or run with STRATA_TEST_TARGET=kafka)")
        self._write_config()
        if self._log_file is None:
            self._log_file = open(self.log_path, "ab")
        self._log_file.write(f"\n===== strata serve --config {self.config_path} "
                             f"({time.strftime('%H:%M:%S')}) =====\n".encode())
        self._log_file.flush()
        env = dict(os.environ)
        env.setdefault("RUST_BACKTRACE", "1")
        self.proc = subprocess.Popen(
            [*self.command_prefix, str(self.binary), "serve", "--config", str(self.config_path)],
            stdin=subprocess.DEVNULL, stdout=self._log_file, stderr=subprocess.STDOUT,
            cwd=str(self.workdir), env=env, start_new_session=True,
            # Stop the broker if pytest itself dies (e.g. killed by a CI timeout).
            preexec_fn=_parent_death_signal)
        url = f"http://{self.host}:{self.admin_port}/health"
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            self._check_alive()
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if resp.status == 200:
                        break
            except (urllib.error.URLError, OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                self._kill()
                raise self._fail(f"GET {url} did not return 200 within {START_TIMEOUT_S}s")
            time.sleep(0.1)

    def _exit_status(self) -> str | None:
        if self.proc is None or self.proc.poll() is None:
            return None
        rc = self.proc.returncode
        if rc < 0:
            try:
                return f"process killed by {signal.Signals(-rc).name}"
            except ValueError:
                return f"process killed by signal {-rc}"
        return f"process exited with code {rc}"

    def _stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
            raise AssertionError(
                f"strata did not exit within {STOP_TIMEOUT_S}s of SIGTERM\n{self.log_tail()}")

    def _kill(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)

    def close(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None


class KafkaBroker(Broker):
    """The reference Apache Kafka broker, driven by scripts/kafka-ref.sh."""

    target = "kafka"

    def __init__(self, workdir, props=None, name="broker"):
        super().__init__(workdir, props, name)
        self.dir = self.workdir / "kafka"
        self.script_log = self.workdir / "kafka-ref.out"
        # Extra kafka-ref.sh environment, e.g. KAFKA_REF_VOTERS for one node of a cluster.
        self.env: dict[str, str] = {}

    @property
    def log_path(self) -> Path:
        # kafka-ref.sh writes <dir>/logs/server.log (log4j) and <dir>/logs/kafka.out (stdout).
        return self.dir / "logs" / "server.log"

    @property
    def data_dir(self) -> Path:
        # kafka-ref.sh's log.dirs.
        return self.dir / "data"

    def log_tail(self, lines: int = 60) -> str:
        parts = []
        for path, n in ((self.script_log, 20), (self.dir / "logs" / "kafka.out", 20),
                        (self.log_path, lines)):
            if path.exists():
                parts.append(f"--- {path} ---\n{_tail(path, n)}")
        return "\n".join(parts) or "<no logs>"

    def _script(self, *args: str, timeout: float) -> subprocess.CompletedProcess:
        if not KAFKA_REF.exists():
            pytest.fail(f"{KAFKA_REF} does not exist; it is needed for STRATA_TEST_TARGET=kafka")
        props = dict(KAFKA_ONLY_PROPS)
        props.update(self.props)
        env = dict(os.environ)
        env["KAFKA_REF_EXTRA"] = "\n".join(f"{k}={v}" for k, v in props.items())
        # Keep the reference JVM small and light on JIT CPU (the machine is shared).
        env.setdefault("KAFKA_REF_HEAP_OPTS", "-Xmx512m -Xms512m")
        env.setdefault("KAFKA_REF_JVM_OPTS", "-XX:TieredStopAtLevel=1 -XX:CICompilerCount=1")
        env.setdefault("KAFKA_REF_TIMEOUT", str(int(START_TIMEOUT_S)))
        env.update(self.env)
        with open(self.script_log, "ab") as out:
            out.write(f"\n===== kafka-ref.sh {' '.join(args)} =====\n".encode())
            out.flush()
            return subprocess.run(["bash", str(KAFKA_REF), *args], stdin=subprocess.DEVNULL,
                                  stdout=out, stderr=subprocess.STDOUT, env=env,
                                  cwd=str(REPO_ROOT), timeout=timeout)

    def _pid(self) -> int | None:
        """The live Kafka process of this dir (checked like kafka-ref.sh: a stale pid
        file whose number was reused does not count)."""
        try:
            pid = int((self.dir / "kafka.pid").read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except (OSError, ValueError):
            return None
        if str(self.dir.resolve()).encode() not in cmdline or not _pid_alive(pid):
            return None
        return pid

    def _start(self) -> None:
        try:
            cp = self._script("start", str(self.port), str(self.dir), timeout=START_TIMEOUT_S + 60)
        except subprocess.TimeoutExpired:
            self._kill()
            raise self._fail("kafka-ref.sh start timed out")
        if cp.returncode != 0:
            self._kill()
            raise self._fail(f"kafka-ref.sh start exited {cp.returncode}")

    def _exit_status(self) -> str | None:
        if (self.dir / "kafka.pid").exists() and self._pid() is None:
            return "kafka process is gone"
        return None

    def _stop(self) -> None:
        cp = self._script("stop", str(self.dir), timeout=STOP_TIMEOUT_S + 30)
        if cp.returncode != 0:
            self._kill()
            raise AssertionError(f"kafka-ref.sh stop exited {cp.returncode}\n{self.log_tail()}")

    def _kill(self) -> None:
        pid = self._pid()
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 30
            while _pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)

    def close(self) -> None:
        pass


BROKER_CLASS = StrataBroker if TARGET == "strata" else KafkaBroker


class BrokerPool:
    """Starts brokers on demand and stops all of them in close()."""

    def __init__(self, tmp_factory, label: str):
        self._tmp_factory = tmp_factory
        self._label = re.sub(r"[^A-Za-z0-9_.-]+", "_", label)[-60:]
        self.brokers: list[Broker] = []

    def __call__(self, props: dict | None = None, name: str | None = None, start: bool = True) -> Broker:
        name = name or f"{self._label}-{len(self.brokers)}"
        workdir = self._tmp_factory(name)
        b = BROKER_CLASS(workdir, props, name=name)
        self.brokers.append(b)
        if start:
            b.start()
        return b

    def close(self) -> None:
        errors = []
        for b in reversed(self.brokers):
            try:
                # A crash-tested broker may be down already; stop() is a no-op then.
                b.stop()
            except Exception as e:  # noqa: BLE001
                errors.append(e)
                try:
                    b._kill()
                except Exception:  # noqa: BLE001
                    pass
            finally:
                b.close()
        self.brokers.clear()
        if errors:
            raise errors[0]


def pytest_report_header(config):
    lines = [f"interop target: {TARGET}"]
    if TARGET == "strata":
        b = Path(os.environ.get("STRATA_BIN", "target/debug/strata"))
        lines.append(f"strata binary: {b if b.is_absolute() else REPO_ROOT / b}")
    else:
        lines.append(f"reference kafka: {KAFKA_REF}")
    return lines


@pytest.fixture(scope="session")
def target() -> str:
    return TARGET


@pytest.fixture(scope="session")
def _shared_broker(tmp_path_factory):
    pool = BrokerPool(lambda n: tmp_path_factory.mktemp(n, numbered=True), "session")
    try:
        yield pool(name="default")
    finally:
        pool.close()


def _revive(b: Broker, when: str) -> None:
    how = b.died()
    if how is None:
        return
    tail = b.log_tail()
    b.running = False
    _LIVE_BROKERS.discard(b)
    b.start()  # so that the following tests can run
    pytest.fail(f"the shared {b.target} broker died {when} ({how}); it was restarted.\n"
                f"--- log tail ---\n{tail}", pytrace=False)


@pytest.fixture
def broker(_shared_broker):
    """The shared default broker (auto.create.topics.enable=true, num.partitions=2).

    Checked before and after every test: if its process died, the test fails with
    the log tail and the broker is restarted for the next tests.
    """
    _revive(_shared_broker, "before this test")
    yield _shared_broker
    _revive(_shared_broker, "during this test")


@pytest.fixture
def broker_factory(tmp_path):
    """broker_factory(props=None, name=None, start=True) -> a dedicated broker for one test."""
    counter = iter(range(1000))
    pool = BrokerPool(lambda n: tmp_path / f"{n}-{next(counter)}", "test")
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture(scope="module")
def module_broker_factory(tmp_path_factory, request):
    """Like broker_factory, but the brokers live until the end of the module."""
    pool = BrokerPool(lambda n: tmp_path_factory.mktemp(n, numbered=True),
                      request.module.__name__.split(".")[-1])
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture
def topic_name(request):
    """A topic name unique to this test (and this run)."""
    import uuid

    base = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name).strip("-")[:80]
    return f"{base}-{uuid.uuid4().hex[:8]}"


# --------------------------------------------------------------------------- S3 (moto)

S3_READY_TIMEOUT_S = 20.0


def _moto_server_binary() -> Path | None:
    """$STRATA_MOTO_SERVER, else moto_server next to this Python (the venv), else
    $STRATA_VENV/bin, else PATH."""
    explicit = os.environ.get("STRATA_MOTO_SERVER")
    if explicit:
        return Path(explicit)
    venv = Path(os.environ.get("STRATA_VENV") or (STRATA_CACHE / "venv"))
    for candidate in (Path(sys.executable).parent / "moto_server", venv / "bin" / "moto_server"):
        if candidate.is_file():
            return candidate
    found = shutil.which("moto_server")
    return Path(found) if found else None


class S3Server:
    """moto_server (moto[s3] from PyPI) on a free 127.0.0.1 port with one fresh bucket.

    moto keeps objects in memory and accepts any credentials without checking signatures.
    ``.endpoint``, ``.bucket``, ``.region``, ``.access_key``, ``.secret_key``, ``.client``
    (a boto3 S3 client), ``.keys(prefix="")``, ``.url(prefix)`` and
    ``.broker_props(prefix)`` (the ``strata.remote.store.*`` broker settings).
    """

    region = "us-east-1"
    access_key = "strata-test-access-key"
    secret_key = "strata-test-secret-key"

    def __init__(self, binary: Path, workdir: Path, bucket: str):
        self.binary = binary
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.bucket = bucket
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log_path = self.workdir / "moto.log"
        self.proc: subprocess.Popen | None = None
        self.client = None

    def start(self) -> "S3Server":
        import boto3
        from botocore.config import Config

        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [str(self.binary), "-H", "127.0.0.1", "-p", str(self.port)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                cwd=str(self.workdir), start_new_session=True,
                preexec_fn=_parent_death_signal)
        deadline = time.monotonic() + S3_READY_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"moto_server exited with {self.proc.returncode} before "
                                   f"serving\n{self.log_tail()}")
            try:
                # Any HTTP answer means it serves (moto lists the buckets).
                with urllib.request.urlopen(self.endpoint + "/", timeout=1):
                    break
            except urllib.error.HTTPError:
                break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"moto_server did not answer on {self.endpoint} within "
                                   f"{S3_READY_TIMEOUT_S}s\n{self.log_tail()}")
            time.sleep(0.1)
        self.client = boto3.client(
            "s3", endpoint_url=self.endpoint, region_name=self.region,
            aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3}))
        self.client.create_bucket(Bucket=self.bucket)
        return self

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)

    def keys(self, prefix: str = "") -> list[str]:
        """Every object key in the bucket that starts with prefix, sorted."""
        out = []
        for page in self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix):
            out.extend(o["Key"] for o in page.get("Contents", []))
        return sorted(out)

    def url(self, prefix: str = "") -> str:
        prefix = prefix.strip("/")
        return f"s3://{self.bucket}/{prefix}" if prefix else f"s3://{self.bucket}"

    def broker_props(self, prefix: str = "") -> dict[str, str]:
        """Broker settings that put Strata's remote store in this bucket under prefix."""
        return {
            "strata.remote.store.url": self.url(prefix),
            "strata.remote.store.endpoint": self.endpoint,
            "strata.remote.store.region": self.region,
            "strata.remote.store.access.key.id": self.access_key,
            "strata.remote.store.secret.access.key": self.secret_key,
            "strata.remote.store.path.style": "true",
        }

    def log_tail(self, lines: int = 40) -> str:
        return _tail(self.log_path, lines)


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory):
    """A moto S3 server with a fresh bucket, for the module's tests (stopped at teardown).

    Skips when moto_server or boto3 is missing (pip install -r tests/interop/requirements.txt).
    """
    import uuid

    binary = _moto_server_binary()
    if binary is None or not binary.is_file():
        where = f"{binary} does not exist" if binary else "not in the venv nor on PATH"
        pytest.skip(f"moto_server not found ({where}); "
                    f"pip install -r tests/interop/requirements.txt or set STRATA_MOTO_SERVER")
    import importlib.util
    if importlib.util.find_spec("boto3") is None:
        pytest.skip("boto3 not installed; pip install -r tests/interop/requirements.txt")
    server = S3Server(binary, tmp_path_factory.mktemp("moto", numbered=True),
                      f"strata-{uuid.uuid4().hex[:12]}")
    try:
        yield server.start()
    finally:
        server.stop()
