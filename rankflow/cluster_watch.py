"""Watching the other processes of a run over several processes: they must come, and a lost one
stops this process, within ``--peer-timeout``, with one line and never a hang.

Bytewax leaves both to timely's networking (read from the source of the timely revision Bytewax
0.21.1 builds with, ``communication/src/networking.rs`` and ``allocator/zero_copy/tcp.rs``):

- At start-up process ``i`` connects to every process below it, retrying once a second for
  ever, and accepts one connection from every process above it, for ever. This happens inside
  ``cluster_main`` with the GIL released and before any worker runs: Python's signal handlers
  never run there, so a process whose peers never come ignored SIGTERM and Ctrl-C.
- Once running, each pair of processes shares one TCP connection with a send and a receive
  thread. A read error or an end of stream panics the receive thread ("timely communication
  error"), which poisons the workers' queues: every worker panics and ``cluster_main`` raises.
  So a process killed outright (its kernel closes its sockets) stops the others within moments.
  A host that vanishes without closing anything (a cut link, a powered-off machine) gives no
  error at all: TCP retransmits for about 15 minutes, and an idle connection waits for ever.

So this watch, a thread beside ``cluster_main``: finds the peers' connections among the process's
own sockets (``/proc/self/fd``) and gives them TCP keepalive and ``TCP_USER_TIMEOUT``, so the
kernel itself fails a connection whose peer answered nothing for the timeout, and timely's
panic follows; stops the process with one line if the peers have not all connected within the
timeout, or if the main thread has not returned some time after a peer's connection failed (the
run can no longer finish: timely's shutdown may wait on the dead connection); and receives the
signals through :func:`signal.set_wakeup_fd`, so that SIGTERM or Ctrl-C while waiting for peers
stops the process at once. After the peers came, a signal first asks for the graceful stop
(``rankflow.execution``); the other processes do not stop with this one, so if the process has
not ended within the timeout it stops anyway, and a second signal ends it after a moment.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass

log = logging.getLogger("rankflow.run")

DEFAULT_PEER_TIMEOUT_S = 60.0
"""How long the processes of a run wait for one another at start, and how long a silent peer
connection lasts before the run stops: a rolling start of a few machines fits in it, and a lost
host stops the run within about a minute."""

ABORT_GRACE_S = 3.0
"""After a second signal, how long the main thread has to end before the watch ends the process."""

REPEAT_S = 1.0
"""The same signal again within this time of the first is the same request, delivered twice: to the
whole process group (a terminal's Ctrl-C, a process manager) and passed on by the parent of
``--processes``. A person's second Ctrl-C comes later."""

TICK_S = 0.2


def is_repeat(signum: int, first: list[int], first_at: list[float]) -> bool:
    """Whether ``signum`` repeats the first signal (``first``, received at ``first_at``; empty: none)."""
    return bool(first) and first[0] == signum and bool(first_at) and time.monotonic() - first_at[0] < REPEAT_S
_TCP_ESTABLISHED = 1


@dataclass(frozen=True)
class Peer:
    """A connection to another process of the run: which one (as far as the addresses tell) and a
    descriptor of our own for its socket."""

    label: str
    fd: int

    def alive(self) -> bool:
        """The connection is still established (``tcp_info``'s first byte is the TCP state)."""
        try:
            with socket.socket(fileno=os.dup(self.fd)) as s:
                return s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[0] == _TCP_ESTABLISHED
        except OSError:
            return False


def _resolve(address: str) -> tuple[str, int]:
    """``address``'s IP and port, as a connected socket names them (as given if it does not resolve
    now: timely retries it, and the watch's time limit applies)."""
    host, _, port = address.rpartition(":")
    try:
        resolved = socket.getaddrinfo(host.strip("[]"), int(port), type=socket.SOCK_STREAM)[0][4]
        return str(resolved[0]), int(resolved[1])
    except (OSError, ValueError):
        return host, int(port) if port.isdigit() else 0


class ClusterWatch:
    """The watch of one process of a cluster run (see the module's docstring)."""

    def __init__(self, addresses: list[str], process_id: int, timeout_s: float = DEFAULT_PEER_TIMEOUT_S) -> None:
        self.addresses = addresses
        self.process_id = process_id
        self.timeout_s = timeout_s
        self._others = len(addresses) - 1
        resolved = [_resolve(a) for a in addresses]
        self._own = resolved[process_id]
        self._below = {resolved[j]: j for j in range(process_id)}  # we connect to these
        self._above = {j: resolved[j][0] for j in range(process_id + 1, len(addresses))}  # these connect to us
        self._done = threading.Event()
        self._signals: list[int] = []
        self._signal_at: list[float] = []
        self._wakeup: tuple[socket.socket, socket.socket] | None = None
        self._previous_wakeup = -1
        self.peers: list[Peer] = []
        self.lost: str | None = None  # which peer's connection failed first, for the run's error

    def start(self) -> ClusterWatch:
        if self._others > 0:
            if threading.current_thread() is threading.main_thread():
                self._wakeup = socket.socketpair()
                for end in self._wakeup:
                    end.setblocking(False)
                self._previous_wakeup = signal.set_wakeup_fd(self._wakeup[1].fileno(), warn_on_full_buffer=False)
            threading.Thread(target=self._watch, name="rankflow-cluster-watch", daemon=True).start()
        return self

    def stop(self) -> None:
        """The main thread is back from the cluster: the watch ends and acts no more."""
        self._done.set()
        if self._wakeup is not None:
            signal.set_wakeup_fd(self._previous_wakeup)
            for end in self._wakeup:
                end.close()
            self._wakeup = None
        for peer in self.peers:
            os.close(peer.fd)
        self.peers = []

    def _watch(self) -> None:
        started = time.monotonic()
        deadline: float | None = None  # when the process stops if the main thread has not returned
        why = ""
        while not self._done.is_set():
            for signum in self._received():
                if not self.peers:
                    self._exit(128 + signum, f"stopped by {signal.Signals(signum).name} while waiting for the other "
                                             "processes of the run")
                if is_repeat(signum, self._signals[:1], self._signal_at[:1]):
                    continue
                self._signals.append(signum)
                self._signal_at.append(time.monotonic())
                if len(self._signals) == 1:
                    deadline, why = time.monotonic() + self.timeout_s, (
                        f"stopped by {signal.Signals(signum).name}: the other processes of the run did not stop "
                        f"with this one within {self.timeout_s:g} s (a restart resumes from the last barrier)")
                else:
                    deadline, why = time.monotonic() + ABORT_GRACE_S, "stopped: interrupted again"
            if not self.peers:
                found = self._connections()
                if len(found) == self._others:
                    for peer in found:
                        self._keep_alive(peer.fd)
                    self.peers = found
                    log.info("all %d processes of the run are connected", self._others + 1)
                    continue
                for peer in found:
                    os.close(peer.fd)
                if time.monotonic() - started > self.timeout_s:
                    self._exit(1, f"stopped: only {len(found)} of the {self._others} other processes of the run "
                                  f"({', '.join(a for i, a in enumerate(self.addresses) if i != self.process_id)}) "
                                  f"connected within {self.timeout_s:g} s (--peer-timeout); start every process "
                                  "with the same --addresses and --run-id")
            elif self.lost is None:
                self.lost = self._gone()
                if self.lost is not None:
                    # a peer's connection also closes when the run ends well: the timeout again
                    # before ending it, so that a slow but normal end is not taken for a hang
                    lost_deadline = time.monotonic() + self.timeout_s
                    if deadline is None or lost_deadline < deadline:
                        deadline, why = lost_deadline, self.lost_line()
            if deadline is not None and time.monotonic() > deadline and not self._done.is_set():
                self._exit(1 if not self._signals else 128 + self._signals[0], why)
            self._done.wait(TICK_S)

    def lost_now(self) -> bool:
        """Whether a peer's connection has failed, looked at now (the run just failed)."""
        if self.lost is None:
            self.lost = self._gone()
        return self.lost is not None

    def _gone(self) -> str | None:
        """The peers whose connection failed (the first one lost takes the others with it in moments,
        so all are named), or None."""
        gone = [p.label for p in self.peers if not p.alive()]
        return " and ".join(gone) if gone else None

    def lost_line(self) -> str:
        """The one line of a run stopped by a lost peer."""
        return (f"stopped: lost the connection to {self.lost or 'another process'} of the run; start the lost "
                "process again, then the others (with --recovery-dir the run resumes from its last barrier)")

    def _received(self) -> list[int]:
        if self._wakeup is None:
            return []
        try:
            ready, _, _ = select.select([self._wakeup[0]], [], [], 0)
            return list(self._wakeup[0].recv(64)) if ready else []
        except OSError:  # closed by stop()
            return []

    def _exit(self, status: int, line: str) -> None:
        if self._done.is_set():
            return
        log.error("%s", line)
        for handler in logging.getLogger().handlers:
            handler.flush()
        sys.stderr.flush()
        os._exit(status)

    def _connections(self) -> list[Peer]:
        """The established TCP connections to the other processes among this process's sockets:
        the ones to a lower process's address, and the ones accepted on our own port."""
        found = []
        taken: set[int] = set()
        seen: set[str] = set()  # timely holds each connection twice (its reader is a clone): one socket, one peer
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
                if not target.startswith("socket:") or target in seen:
                    continue
                seen.add(target)
                with socket.socket(fileno=os.dup(fd)) as s:
                    if s.type != socket.SOCK_STREAM or s.family not in (socket.AF_INET, socket.AF_INET6):
                        continue
                    remote, local = s.getpeername()[:2], s.getsockname()[:2]
            except OSError:  # not connected, or closed meanwhile
                continue
            if remote in self._below:
                label = f"process {self._below[remote]} ({self.addresses[self._below[remote]]})"
            elif local[1] == self._own[1] and local[0] == self._own[0]:
                candidates = [j for j, host in self._above.items() if host == remote[0] and j not in taken]
                label = f"process {candidates[0]} ({self.addresses[candidates[0]]})" if len(candidates) == 1 \
                    else f"a process at {remote[0]}"
                taken.update(candidates[:1])
            else:
                continue
            found.append(Peer(label, os.dup(fd)))
        return found

    def _keep_alive(self, fd: int) -> None:
        """Let the kernel fail a connection whose peer answers nothing for the timeout: keepalive
        probes on an idle one, ``TCP_USER_TIMEOUT`` on one with data unacknowledged."""
        timeout = max(1, int(self.timeout_s))
        idle = max(1, timeout // 3)
        interval = max(1, (timeout - idle) // 4)
        with socket.socket(fileno=os.dup(fd)) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, idle)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, interval)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, max(1, (timeout - idle) // interval))
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, timeout * 1000)

