"""The recovery directory: Bytewax's state store, the user changelogs, and what they were made with.

Bytewax stores every key's state and every source partition's position under the
names of the flow's layout: user shards, song partitions, and source partitions
named by their input (``TOPIC/N`` or the file path). A resume with another layout
or another input would find no state under the new names and count wrong (a new
topic's partitions would start from 0 beside users and counts of the old one). So
the directory records both (and the dead-letter output, whose file offset is part of
the state) beside the partitions, and a resume with different ones is refused with
the options to use.

A boards run also records a fingerprint of its signing key (never the key): a resume
that dropped the key would count forged results beside checked ones, one with
another key would refuse the match servers' real results.
"""

from __future__ import annotations

import fcntl
import hmac
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

import orjson
from bytewax.recovery import RecoveryConfig, init_db_dir

from rankflow.endpoints import input_identity
from rankflow import products
from rankflow.errors import UsageError
from rankflow.resume_point import has_executions
from rankflow.products.boards import SIGNING_KEY_ENV

if TYPE_CHECKING:
    from rankflow.options import RunOptions

RECOVERY_PARTITIONS = 2
LAYOUT_FILE = "rankflow-layout.json"
INIT_LOCK_FILE = "rankflow-init.lock"
"""Held while the store is looked for and created (:func:`_init_lock`)."""
FORMAT_KEY = "format"
LAYOUT_FORMAT = 1
"""The layout file's format, recorded in it (``FORMAT_KEY``): what a reader goes by to read the
rest. A layout without it is legacy (:func:`_legacy_layout`)."""
USER_CHANGELOG = "user-changelog"
WINDOW_CHANGELOG = "window-changelog"
KEY_FINGERPRINT = "signing_key_fingerprint"
WORKERS_IN_ALL = "workers_in_all"
"""Recorded when shards are keyed by input partition: their keys depend on the worker that
reads each partition (``operators.keyed_shards.partition_key``), so a resume needs as many."""
FINGERPRINT_LABEL = b"rankflow recovery directory: signing key fingerprint v1"
"""What a fingerprint signs: no result's signed bytes (``LEN:ID|...``) look like it."""


def user_changelog(recovery_dir: str | None) -> Path | None:
    """Where user shards keep their changelogs (``connectors.changelog``), beside Bytewax's partitions."""
    return None if recovery_dir is None else Path(recovery_dir) / USER_CHANGELOG


def window_changelog(recovery_dir: str | None) -> Path | None:
    """Where the activity flow's counter partitions keep their buckets' changelogs."""
    return None if recovery_dir is None else Path(recovery_dir) / WINDOW_CHANGELOG


def resumes_from_recovery(recovery_dir: str | None) -> TypeGuard[str]:
    """Whether a run will start from stored state (else it starts its input over); if so,
    ``recovery_dir`` is a path, as the type checker then knows.

    A store no execution has used yet is started over like no store: the processes of a run
    over several machines start on their own, and the first one creates the store before the
    others look. They still decide alike, since Bytewax records an execution only once every
    process is connected; looked at under the lock the creator holds (:func:`_init_lock`)."""
    if recovery_dir is None or not any(Path(recovery_dir).glob("part-*.sqlite3")):
        return False
    with _init_lock(Path(recovery_dir)):
        return has_executions(recovery_dir)


def recorded(opts: RunOptions) -> dict[str, Any]:
    """What the directory must have been made with for ``opts`` to resume from it: the shared
    layout, and what the run's product adds (``Product.layout``).

    The dead-letter output too: a JSON Lines sink resumes at a byte offset of the
    file it wrote, which in another file would cut someone else's data.
    """
    layout = {"flow": opts.flow, "song_partitions": opts.song_partitions, "user_shards": opts.user_shards,
              "input": input_identity(opts.input), "dead_letter": opts.dead_letter}
    layout.update(opts.product.layout(opts))
    return layout


def key_fingerprint(key: bytes | None) -> str | None:
    """What tells two signing keys apart without revealing them: HMAC-SHA256 of a fixed
    label under the key (a plain hash of the key could be checked against guesses
    without the label, and the directory may be copied, backed up or shared).

    >>> key_fingerprint(bytes.fromhex("ab" * 32)) == key_fingerprint(bytes.fromhex("ab" * 32))
    True
    >>> key_fingerprint(bytes.fromhex("ab" * 32)) != key_fingerprint(bytes.fromhex("cd" * 32))
    True
    >>> key_fingerprint(None) is None
    True
    """
    return None if key is None else hmac.digest(key, FINGERPRINT_LABEL, "sha256").hex()


def check_resumable(opts: RunOptions) -> None:
    """Refuse (``UsageError``) a resume from a directory made with another input, layout
    or signing key. Reads only: a run with several local processes checks before it
    starts them, so the refusal is the parent's usage error, not a child's failure. A store
    that no execution used yet is checked too: the processes of one run must agree."""
    if opts.recovery_dir is None or not any(Path(opts.recovery_dir).glob("part-*.sqlite3")):
        return
    path = Path(opts.recovery_dir)
    stored = read_layout(path)
    if stored is not None:
        _refuse_other(path, stored, recorded(opts))


def recovery_config(opts: RunOptions) -> RecoveryConfig | None:
    """Bytewax recovery in ``opts.recovery_dir``, creating its partitions the first time."""
    if opts.recovery_dir is None:
        return None
    check_resumable(opts)
    path = Path(opts.recovery_dir)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file of that name, or no permission: before the run claims anything
        raise UsageError(f"--recovery-dir: cannot use {path} as a directory: {exc.strerror}") from None
    with _init_lock(path):
        if not any(path.glob("part-*.sqlite3")):
            for left in (USER_CHANGELOG, WINDOW_CHANGELOG):  # no store refers to what may be left there
                shutil.rmtree(path / left, ignore_errors=True)
            init_db_dir(path, RECOVERY_PARTITIONS)
        write_layout(path, recorded(opts))
    return RecoveryConfig(str(path))


@contextmanager
def _init_lock(path: Path) -> Iterator[None]:
    """Held while a process looks for the store's partitions and creates them: the processes of
    one run start together, and two creating one store at once fail in SQLite ("table parts
    already exists"). An advisory lock on a file in the directory, released when the process ends."""
    with open(path / INIT_LOCK_FILE, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@dataclass(frozen=True)
class StoredLayout:
    """A directory's layout as read: what it recorded, and the names of the current layout its
    writer did not record (a legacy directory's), which a resume cannot be compared on."""

    values: dict[str, Any]
    unrecorded: frozenset[str] = frozenset()


def write_layout(path: Path, layout: dict[str, Any]) -> None:
    """Record ``layout`` under the current format (:data:`LAYOUT_FORMAT`), replacing whatever was there.

    Written whole or not at all (a new file made durable, then renamed over the old one): a run
    killed while writing it must leave a directory its restart can read, not an empty file."""
    final = path / LAYOUT_FILE
    temporary = final.with_name(f".{LAYOUT_FILE}.{os.getpid()}")
    with open(temporary, "wb") as out:
        out.write(orjson.dumps({FORMAT_KEY: LAYOUT_FORMAT, **layout}))
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, final)
    directory = os.open(path, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def read_layout(path: Path) -> StoredLayout | None:
    """The layout ``path`` records, by the format it says it has; None if it records none (a
    directory from before layouts were recorded: nothing to compare a resume with)."""
    try:
        stored = orjson.loads((path / LAYOUT_FILE).read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, orjson.JSONDecodeError) as exc:
        raise UsageError(f"{path / LAYOUT_FILE} cannot be read ({exc}): start over in an empty --recovery-dir") \
            from None
    version = stored.pop(FORMAT_KEY, None) if isinstance(stored, dict) else None
    if version is None:
        return _legacy_layout(stored)
    if version != LAYOUT_FORMAT:
        raise UsageError(f"{path} was written by another rankflow (recovery layout format {version}, this one "
                         f"reads format {LAYOUT_FORMAT}): resume with that version, or start over in an empty "
                         "--recovery-dir")
    return StoredLayout(stored)


LEGACY_RECORDED_LATER = ("input", "dead_letter", KEY_FINGERPRINT, "recent_minutes")
"""What a layout without a format marker may lack: the fields added to it one by one."""


def _legacy_layout(stored: dict[str, Any]) -> StoredLayout:
    """Legacy: a layout written before layouts carried their format (``LAYOUT_FORMAT``), i.e. by
    every rankflow until then. It holds ``flow``, ``song_partitions``, ``user_shards`` and the
    product's fields of its time; the fields recorded later (:data:`LEGACY_RECORDED_LATER`: the
    input, the dead-letter output, a boards run's key fingerprint, the listener flow's recent
    plays) are there only if its writer knew them. What it lacks is not compared, except the key
    fingerprint (``_refuse_other_key``). The only place that recognises a layout by its shape: a
    resume writes the current format, so a directory is legacy until its first resume."""
    return StoredLayout(stored, frozenset(k for k in LEGACY_RECORDED_LATER if k not in stored))


def _refuse_other(path: Path, stored: StoredLayout, wanted: dict[str, Any]) -> None:
    """Stop a resume whose layout or input differs from the stored one (what the directory
    did not record is not compared)."""
    had = stored.values
    if "input" not in stored.unrecorded and had["input"] != wanted["input"]:
        raise UsageError(f"{path} holds state of a run reading {_describe(had['input'])}, but this run reads "
                         f"{_describe(wanted['input'])}: resume with the same input, or start over in an empty "
                         "--recovery-dir")
    if "dead_letter" not in stored.unrecorded and had["dead_letter"] != wanted["dead_letter"]:
        raise UsageError(f"{path} holds state of a run writing dead letters to {had['dead_letter']}, but this "
                         f"run writes them to {wanted['dead_letter']}: resume with --dead-letter "
                         f"{had['dead_letter']}, or start over in an empty --recovery-dir")
    layout = {k: v for k, v in had.items() if k not in ("input", "dead_letter", KEY_FINGERPRINT, WORKERS_IN_ALL)}
    if had.get("flow") == wanted["flow"]:  # what it was made with before a field was recorded
        layout.update({k: v for k, v in products.get(wanted["flow"]).layout_before().items()
                       if k in wanted and k not in layout})
    if layout != {k: wanted.get(k) for k in layout}:  # another flow's layout has other fields
        options = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in layout.items())
        raise UsageError(f"{path} holds state of a run with {options}: resume with the same options, "
                         "or start over in an empty --recovery-dir")
    if KEY_FINGERPRINT in wanted:  # before the workers: a key dropped or changed is the graver mistake
        _refuse_other_key(path, stored, wanted[KEY_FINGERPRINT])
    if had.get(WORKERS_IN_ALL) != wanted.get(WORKERS_IN_ALL):
        raise UsageError(f"{path} holds user shards keyed by input partition on {had.get(WORKERS_IN_ALL)} workers "
                         f"in all processes, but this run has {wanted.get(WORKERS_IN_ALL)}: resume with as many "
                         "(--processes or --addresses, times --workers), or start over in an empty --recovery-dir")


def _refuse_other_key(path: Path, stored: StoredLayout, wanted: str | None) -> None:
    """Stop a boards resume whose signing key is not the stored run's (same key, or none for both).

    A directory of a version that did not record the key cannot tell whether its run
    checked signatures: a resume with a key is taken (and recorded from then on), one
    without is refused, as it would count forged results if the stored run had a key.
    """
    if KEY_FINGERPRINT in stored.unrecorded:
        if wanted is None:
            raise UsageError(f"{path} was written by an older rankflow, which did not record whether the run "
                             f"checked signatures: resume with its --signing-key (or ${SIGNING_KEY_ENV}), or "
                             "start over in an empty --recovery-dir")
        return
    had = stored.values.get(KEY_FINGERPRINT)
    if had == wanted:
        return
    same_key = f"resume with the key it had (--signing-key or ${SIGNING_KEY_ENV})"
    if wanted is None:
        problem = "checked signatures with a signing key, but this run has none (the key was dropped)"
    elif had is None:
        problem = "counted results without checking signatures, but this run has a signing key (a key was added)"
        same_key = "resume without a signing key"
    else:
        problem = "checked signatures with another signing key (the key was changed)"
    raise UsageError(f"{path} holds state of a run that {problem}: {same_key}, or start over in an empty "
                     "--recovery-dir")


def _describe(identity: dict[str, Any]) -> str:
    if "kafka_topic" in identity:
        return f"Kafka topic {identity['kafka_topic']!r}"
    return "JSON Lines " + ", ".join(repr(f) for f in identity["jsonl_files"])
