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

import hmac
import shutil
from pathlib import Path
from typing import Any

import orjson
from bytewax.recovery import RecoveryConfig, init_db_dir

from rankflow.endpoints import input_identity
from rankflow.options import SIGNING_KEY_ENV, RunOptions, UsageError

RECOVERY_PARTITIONS = 2
LAYOUT_FILE = "rankflow-layout.json"
USER_CHANGELOG = "user-changelog"
WINDOW_CHANGELOG = "window-changelog"
KEY_FINGERPRINT = "signing_key_fingerprint"
FINGERPRINT_LABEL = b"rankflow recovery directory: signing key fingerprint v1"
"""What a fingerprint signs: no result's signed bytes (``LEN:ID|...``) look like it."""


def user_changelog(recovery_dir: str | None) -> Path | None:
    """Where user shards keep their changelogs (``connectors.changelog``), beside Bytewax's partitions."""
    return None if recovery_dir is None else Path(recovery_dir) / USER_CHANGELOG


def window_changelog(recovery_dir: str | None) -> Path | None:
    """Where the activity flow's counter partitions keep their buckets' changelogs."""
    return None if recovery_dir is None else Path(recovery_dir) / WINDOW_CHANGELOG


def resumes_from_recovery(recovery_dir: str | None) -> bool:
    """Whether a run will start from stored state (else it starts its input over)."""
    return recovery_dir is not None and any(Path(recovery_dir).glob("part-*.sqlite3"))


def recorded(opts: RunOptions) -> dict[str, Any]:
    """What the directory must have been made with for ``opts`` to resume from it.

    The dead-letter output too: a JSON Lines sink resumes at a byte offset of the
    file it wrote, which in another file would cut someone else's data.
    """
    layout = {"flow": opts.flow, "song_partitions": opts.song_partitions, "user_shards": opts.user_shards,
              "input": input_identity(opts.input), "dead_letter": opts.dead_letter}
    if opts.flow == "listeners":  # the song partitions' window state is made for its length (0: none)
        layout["recent_minutes"] = opts.recent_minutes
    if opts.flow == "activity":  # the window's shape and what it counts are in the stored buckets
        layout.update(bucket_seconds=opts.bucket_seconds, window_buckets=opts.window_buckets, count=opts.count,
                      global_summary=opts.global_summary)
    if opts.flow == "boards":  # the boards hold only results checked with this key (or none, unchecked)
        layout[KEY_FINGERPRINT] = key_fingerprint(opts.signing_key)
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
    starts them, so the refusal is the parent's usage error, not a child's failure."""
    if not resumes_from_recovery(opts.recovery_dir):
        return
    path = Path(opts.recovery_dir)  # type: ignore[arg-type]  # resumes_from_recovery: not None
    if (path / LAYOUT_FILE).exists():
        _refuse_other(path, orjson.loads((path / LAYOUT_FILE).read_bytes()), recorded(opts))


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
    if not any(path.glob("part-*.sqlite3")):
        for left in (USER_CHANGELOG, WINDOW_CHANGELOG):  # no store refers to what may be left there
            shutil.rmtree(path / left, ignore_errors=True)
        init_db_dir(path, RECOVERY_PARTITIONS)
    (path / LAYOUT_FILE).write_bytes(orjson.dumps(recorded(opts)))
    return RecoveryConfig(str(path))


def _refuse_other(path: Path, stored: dict[str, Any], wanted: dict[str, Any]) -> None:
    """Stop a resume whose layout or input differs from the stored one (keys a directory
    from before inputs were recorded does not have are not compared)."""
    if stored.get("input", wanted["input"]) != wanted["input"]:
        raise UsageError(f"{path} holds state of a run reading {_describe(stored['input'])}, but this run reads "
                         f"{_describe(wanted['input'])}: resume with the same input, or start over in an empty "
                         "--recovery-dir")
    if stored.get("dead_letter", wanted["dead_letter"]) != wanted["dead_letter"]:
        raise UsageError(f"{path} holds state of a run writing dead letters to {stored['dead_letter']}, but this "
                         f"run writes them to {wanted['dead_letter']}: resume with --dead-letter "
                         f"{stored['dead_letter']}, or start over in an empty --recovery-dir")
    layout = {k: v for k, v in stored.items() if k not in ("input", "dead_letter", KEY_FINGERPRINT)}
    if layout != {k: wanted[k] for k in layout}:
        options = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in layout.items())
        raise UsageError(f"{path} holds state of a run with {options}: resume with the same options, "
                         "or start over in an empty --recovery-dir")
    if KEY_FINGERPRINT in wanted:
        _refuse_other_key(path, stored, wanted[KEY_FINGERPRINT])


def _refuse_other_key(path: Path, stored: dict[str, Any], wanted: str | None) -> None:
    """Stop a boards resume whose signing key is not the stored run's (same key, or none for both).

    A directory of a version that did not record the key cannot tell whether its run
    checked signatures: a resume with a key is taken (and recorded from then on), one
    without is refused, as it would count forged results if the stored run had a key.
    """
    if KEY_FINGERPRINT not in stored:
        if wanted is None:
            raise UsageError(f"{path} was written by an older rankflow, which did not record whether the run "
                             f"checked signatures: resume with its --signing-key (or ${SIGNING_KEY_ENV}), or "
                             "start over in an empty --recovery-dir")
        return
    had = stored[KEY_FINGERPRINT]
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
