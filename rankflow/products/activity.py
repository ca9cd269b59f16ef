"""The activity product: channels ranked by messages (or distinct users) in a sliding window
(docs/semantics/windows.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rankflow.arg_types import not_negative, positive
from rankflow.connectors.activity_staging import STAGE_BUDGET
from rankflow.errors import UsageError
from rankflow.products import Option, Product

if TYPE_CHECKING:
    from bytewax.dataflow import Dataflow
    from bytewax.inputs import Source
    from bytewax.outputs import Sink

    from rankflow.api.parts import Part
    from rankflow.api.settings import Settings
    from rankflow.options import RunOptions

class Activity(Product):
    name = "activity"
    title = "most active channels in a sliding window"
    readers = (("rankflow.cli_activity", "activity", "cmd_activity"),)
    routes = ("rankflow.api.activity",)
    serves = "channels ranked by activity in a sliding window"
    read_batch = 2_000  # larger batches measured no cheaper here, paired (docs/benchmarks.md), and hold more memory
    options = (
        Option(("--bucket-seconds",), "bucket_seconds", type=positive, metavar="S",
               help="the width of a time bucket (default: %(default)s)"),
        Option(("--window-buckets",), "window_buckets", type=positive, metavar="N",
               help="buckets in the window (default: %(default)s: one hour of 60 s buckets)"),
        Option(("--count",), "count", choices=("messages", "users"),
               help="count messages, or distinct users per channel (default: %(default)s)"),
        Option(("--global-summary",), "global_summary", type=int, metavar="N",
               help="rank globally from mergeable summaries of N counters per bucket (bounded memory; items carry "
                    "count_low and count_high); 0 ranks exactly (default: %(default)s)"),
        Option(("--publish-stage",), "publish_stage", type=not_negative, metavar="N",
               help="a snapshot changing more than N channels (a bucket leaving the window) is written where "
                    "readers do not look, in Redis calls of about N members, then switched in one short step, so "
                    "queries never wait long for it; 0 writes every snapshot in one call (default: "
                    f"{STAGE_BUDGET} in a live run, 0 with --until-eof)"),
    )

    def namespace(self, namespace: str) -> str:
        from rankflow.connectors.redis_keys import activity_namespace

        return activity_namespace(namespace)

    def check(self, opts: RunOptions) -> None:
        for name, flag in (("bucket_seconds", "bucket-seconds"), ("window_buckets", "window-buckets")):
            if getattr(opts, name) < 1:
                raise UsageError(f"--{flag} must be >= 1")
        if opts.count not in ("messages", "users"):
            raise UsageError(f"--count must be messages or users, got {opts.count!r}")
        if opts.global_summary < 0:
            raise UsageError("--global-summary must be >= 1 (or 0: exact)")
        if opts.global_summary and opts.count != "messages":
            raise UsageError("--global-summary counts messages: with --count users distinct users do not add up "
                             "across buckets (docs/semantics/windows.md 5)")
        if opts.publish_stage is not None and opts.publish_stage < 0:
            raise UsageError("--publish-stage must be >= 0 (0: every snapshot in one script)")

    def layout(self, opts: RunOptions) -> dict[str, Any]:
        """The window's shape and what it counts are in the stored buckets."""
        return {"bucket_seconds": opts.bucket_seconds, "window_buckets": opts.window_buckets, "count": opts.count,
                "global_summary": opts.global_summary}

    def serve_parts(self, settings: Settings) -> list[Part]:
        from rankflow.api.activity_watch import ActivityParts

        return [ActivityParts(settings)]

    def build_flow(self, opts: RunOptions, token: int, generation: int, live: bool, source: Source,
                   dead_letter: Sink, fresh: bool, republish: bool, floor: dict[str, int] | None = None) -> Dataflow:
        from functools import partial

        from rankflow.connectors.redis_activity import ActivityState
        from rankflow.flows.activity import build_flow
        from rankflow.recovery import window_changelog

        return build_flow(
            source,
            dead_letter,
            self.sink(opts, token, generation, live, state=partial(ActivityState, opts.stage_at), floor=floor),
            partitions=opts.song_partitions,
            bucket_ms=opts.bucket_seconds * 1000,
            window_buckets=opts.window_buckets,
            mode=opts.count,
            idle_after_s=None if opts.until_eof else opts.idle_timeout_s,
            summary=opts.global_summary,
            changelog=window_changelog(opts.recovery_dir),
            **self.engine(opts, token),
        )

    def counts(self, final: dict[str, Any]) -> str:
        from rankflow.cli_format import quantity, utc

        return f"{quantity(final['active_pairs'])} active channels, watermark {utc(final['watermark'])}, "


PRODUCT = Activity()
