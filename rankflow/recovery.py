"""The recovery directory: Bytewax's state store, the user changelogs, and what they were made with.

Bytewax stores every key's state and every source partition's position under the
names of the flow's layout: user shards, song partitions, and source partitions
named by their input (``TOPIC/N`` or the file path). A resume with another layout
or another input would find no state under the new names and count wrong (a new
topic's partitions would start from 0 beside users and counts of the old one). So
the directory records both (and the dead-letter output, whose file offset is part of
the state) beside the partitions, and a resume with different ones is refused with
the options to use.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import orjson
from bytewax.recovery import RecoveryConfig, init_db_dir

from rankflow.endpoints import input_identity
from rankflow.options import RunOptions, UsageError

RECOVERY_PARTITIONS = 2
LAYOUT_FILE = "rankflow-layout.json"
USER_CHANGELOG = "user-changelog"
WINDOW_CHANGELOG = "window-changelog"


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
    return layout


def recovery_config(opts: RunOptions) -> RecoveryConfig | None:
    """Bytewax recovery in ``opts.recovery_dir``, creating its partitions the first time."""
    if opts.recovery_dir is None:
        return None
    path = Path(opts.recovery_dir)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file of that name, or no permission: before the run claims anything
        raise UsageError(f"--recovery-dir: cannot use {path} as a directory: {exc.strerror}") from None
    wanted = recorded(opts)
    layout_file = path / LAYOUT_FILE
    if not any(path.glob("part-*.sqlite3")):
        for left in (USER_CHANGELOG, WINDOW_CHANGELOG):  # no store refers to what may be left there
            shutil.rmtree(path / left, ignore_errors=True)
        init_db_dir(path, RECOVERY_PARTITIONS)
    elif layout_file.exists():
        _refuse_other(path, orjson.loads(layout_file.read_bytes()), wanted)
    layout_file.write_bytes(orjson.dumps(wanted))
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
    layout = {k: v for k, v in stored.items() if k not in ("input", "dead_letter")}
    if layout != {k: wanted[k] for k in layout}:
        options = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in layout.items())
        raise UsageError(f"{path} holds state of a run with {options}: resume with the same options, "
                         "or start over in an empty --recovery-dir")


def _describe(identity: dict[str, Any]) -> str:
    if "kafka_topic" in identity:
        return f"Kafka topic {identity['kafka_topic']!r}"
    return "JSON Lines " + ", ".join(repr(f) for f in identity["jsonl_files"])
