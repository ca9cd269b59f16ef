"""Which Bytewax worker a key lands on, and keys chosen to land on a given worker.

A keyed step (``stateful_batch``) sends an item to worker ``SipHash-1-3(key) % W``
(Bytewax 0.21 ``src/operators.rs``: the key's Rust ``String`` hashed by the standard
``DefaultHasher``, zero keys, its bytes then ``0xFF``; ``W`` the workers of every process).
No API pins a key to a worker, but a key can be *chosen* for one: :func:`local_key`
appends the smallest suffix that lands ``base`` on the wanted worker. The per-user
stages use it to keep a source partition's events on the worker that read them, so that
with several processes events are not pickled across (``operators.keyed_shards``).

The hash is computed here in Python, once per key (the keys are cached): the test
``tests/engine/test_worker_keys.py`` checks it against a real Bytewax run, so a Bytewax
that hashed otherwise would fail there, not miscount (a key on another worker is still
correct, only slower).
"""

from __future__ import annotations

from functools import lru_cache

_MASK = 0xFFFFFFFFFFFFFFFF


def _rotl(x: int, b: int) -> int:
    return ((x << b) | (x >> (64 - b))) & _MASK


def _round(v0: int, v1: int, v2: int, v3: int) -> tuple[int, int, int, int]:
    v0 = (v0 + v1) & _MASK
    v1 = _rotl(v1, 13) ^ v0
    v0 = _rotl(v0, 32)
    v2 = (v2 + v3) & _MASK
    v3 = _rotl(v3, 16) ^ v2
    v0 = (v0 + v3) & _MASK
    v3 = _rotl(v3, 21) ^ v0
    v2 = (v2 + v1) & _MASK
    v1 = _rotl(v1, 17) ^ v2
    v2 = _rotl(v2, 32)
    return v0, v1, v2, v3


def siphash13(data: bytes, k0: int = 0, k1: int = 0) -> int:
    """SipHash-1-3 of ``data`` (Rust's ``DefaultHasher`` with ``k0``, ``k1``).

    >>> hex(siphash13(b""))
    '0xd1fba762150c532c'
    """
    v0 = k0 ^ 0x736F6D6570736575
    v1 = k1 ^ 0x646F72616E646F6D
    v2 = k0 ^ 0x6C7967656E657261
    v3 = k1 ^ 0x7465646279746573
    n = len(data)
    end = n - n % 8
    for i in range(0, end, 8):
        m = int.from_bytes(data[i:i + 8], "little")
        v3 ^= m
        v0, v1, v2, v3 = _round(v0, v1, v2, v3)
        v0 ^= m
    b = ((n & 0xFF) << 56) | int.from_bytes(data[end:], "little")
    v3 ^= b
    v0, v1, v2, v3 = _round(v0, v1, v2, v3)
    v0 ^= b
    v2 ^= 0xFF
    for _ in range(3):
        v0, v1, v2, v3 = _round(v0, v1, v2, v3)
    return v0 ^ v1 ^ v2 ^ v3


def worker_of(key: str, workers: int) -> int:
    """The worker (of ``workers`` in all processes) a keyed step sends ``key`` to."""
    return siphash13(key.encode() + b"\xff") % workers


@lru_cache(maxsize=4096)
def local_key(base: str, worker: int, workers: int) -> str:
    """``base``, or ``base~N`` with the smallest N, that a keyed step sends to ``worker``.

    The same arguments give the same key in every process and run, so a key's state
    is found again on resume as long as ``base`` is read by the same worker of the same
    count (``rankflow.recovery`` records the count)."""
    if workers <= 1 or worker_of(base, workers) == worker:
        return base
    n = 1
    while worker_of(f"{base}~{n}", workers) != worker:
        n += 1
    return f"{base}~{n}"
