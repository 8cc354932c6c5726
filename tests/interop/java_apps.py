"""Long-running Java test programs (tests/java: InteropClient commands, StreamsWordCount) as
subprocesses that print one JSON object a line, for tests that kill, pause or restart them.

The classes are built by scripts/build-java-tests.sh into $STRATA_CACHE/java-classes; the jar
sets come from scripts/install-test-deps.sh. ``skip_reason(jarset, cls)`` says why a test
cannot run (or None)."""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
STRATA_CACHE = Path(os.environ.get("STRATA_CACHE") or (Path.home() / ".cache" / "strata"))
CLASSES = STRATA_CACHE / "java-classes"

# A small, JIT-light JVM: the machine is shared and has 2 cores.
JVM_OPTS = ["-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xshare:auto"]


def _java_bin() -> str:
    home = os.environ.get("JAVA_HOME")
    return os.path.join(home, "bin", "java") if home else "java"


def classpath(jarset: str) -> tuple[str | None, str | None]:
    """(classpath of the compiled classes + the jar set, None) or (None, why not)."""
    if shutil.which(_java_bin()) is None:
        return None, "java is not installed"
    script = REPO_ROOT / "scripts" / "java-classpath.sh"
    cp = subprocess.run(["bash", str(script), jarset], capture_output=True, text=True)
    if cp.returncode != 0 or not cp.stdout.strip():
        return None, f"{jarset} jars are missing (scripts/install-test-deps.sh): {cp.stderr.strip()}"
    return f"{CLASSES}:{cp.stdout.strip()}", None


def skip_reason(jarset: str, cls: str) -> str | None:
    class_file = CLASSES / (cls.replace(".", "/") + ".class")
    if not class_file.exists():
        return f"{class_file} is not built (scripts/build-java-tests.sh)"
    return classpath(jarset)[1]


class JavaProcess:
    """A Java main class in its own session, its stdout parsed as JSON lines into a queue and
    its stderr kept in a file (``stderr_tail()``)."""

    def __init__(self, jarset: str, cls: str, args: list, log_path: Path, stdin: bool = False):
        cp, why = classpath(jarset)
        if cp is None:
            raise RuntimeError(why)
        self.log_path = Path(log_path)
        self._err = open(self.log_path, "ab")
        self.events: "queue.Queue[dict]" = queue.Queue()
        self.all_events: list[dict] = []
        self.cmd = [_java_bin(), *JVM_OPTS, "-cp", cp, cls, *[str(a) for a in args]]
        self.proc = subprocess.Popen(
            self.cmd, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=self._err, start_new_session=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            line = line.decode("utf-8", "replace").strip()
            if not line.startswith("{"):
                continue
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            self.all_events.append(ev)
            self.events.put(ev)
        self.events.put({"ev": "<eof>"})

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_for(self, pred, timeout: float) -> dict | None:
        """The next event for which pred(event) holds, or None on timeout or end of output."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                ev = self.events.get(timeout=min(left, 0.5))
            except queue.Empty:
                continue
            if ev.get("ev") == "<eof>":
                self.events.put(ev)  # stay at the end
                return None
            if pred(ev):
                return ev

    def send(self, line: str) -> None:
        self.proc.stdin.write((line + "\n").encode())
        self.proc.stdin.flush()

    def kill9(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def wait(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def close(self) -> None:
        """Kill if still running (test teardown) and release the log file."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        self._reader.join(timeout=5)
        self._err.close()

    def stderr_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text("utf-8", "replace")
        except OSError as e:
            return f"<no stderr log: {e}>"
        return "\n".join(text.splitlines()[-lines:])
