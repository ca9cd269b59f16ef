"""``rankflow bench-boards``: the rig with the score-board systems, and the logs they read."""

from __future__ import annotations

from pathlib import Path

import orjson

from rankflow.bench.boards.logs import one_result_per_player
from rankflow.bench.boards.results import BoardsBenchConfig
from rankflow.bench.rig import OnRig
from rankflow.connectors.redis_keys import Keys, boards_namespace
from rankflow.generate_scores import generate_scores


class BoardsBench(OnRig):
    """The systems (``baseline``: ``rankflow.bench.boards_baseline``; ``flow``: ``rankflow run
    --flow boards --until-eof``; ``flow_durable``: the same with a fresh ``--recovery-dir``)
    on one rig; each part of the benchmark is a module of this package."""

    def __init__(self, cfg: BoardsBenchConfig) -> None:
        super().__init__(cfg.seed)
        self.cfg = cfg
        self.key = bytes.fromhex(cfg.signing_key)

    # -- commands ---------------------------------------------------------------------
    def flow_cmd(self, topic: str, namespace: str, *extra: str) -> list[str]:
        return self.rig.flow_cmd("boards", topic, namespace, "--signing-key", self.cfg.signing_key, *extra)

    def baseline_cmd(self, topic: str, prefix: str) -> list[str]:
        return self.rig.baseline_cmd("boards_baseline", topic, "--prefix", prefix)

    def command(self, system: str, topic: str, name: str) -> list[str]:
        if system == "baseline":
            return self.baseline_cmd(topic, name)
        extra = ["--until-eof"]
        if system == "flow_durable":
            extra += ["--recovery-dir", str(self.work / f"{name}.recovery")]
        return self.flow_cmd(topic, name, *extra)

    # -- logs -------------------------------------------------------------------------
    def score_log(self, results: int, players: int, games: int) -> Path:
        """A clean signed log of realistic matches, kept in ``data/`` across runs."""
        path = self.data / f"boards-{results}-{players}-{games}-s{self.cfg.seed}-{self.cfg.signing_key[:8]}.jsonl"
        if not path.exists():
            self.log(f"generating {path}")
            tmp = path.with_suffix(".tmp")
            generate_scores(players, games, results, self.cfg.seed, tmp, key=self.key, clean=True)
            tmp.rename(path)
        return path

    def players_log(self, players: int) -> Path:
        """One result per player (:func:`one_result_per_player`), kept in ``data/`` across runs."""
        cfg = self.cfg
        path = self.data / f"boards-memory-{players}-s{cfg.seed}-{cfg.signing_key[:8]}.jsonl"
        if not path.exists():
            self.log(f"generating {path}")
            one_result_per_player(path.with_suffix(".tmp"), players, self.key, cfg.seed)
            path.with_suffix(".tmp").rename(path)
        return path

    def produce(self, path: Path, topic: str) -> float:
        return self.rig.produce(path, topic, self.cfg.partitions, key_field="player_id")

    def count_entries(self, namespace: str) -> int:
        """The entries of every board of ``namespace`` (ZCARD)."""
        keys = Keys(boards_namespace(namespace))
        total = 0
        for name in self.client.smembers(keys.boards):
            game, board = orjson.loads(name)
            total += int(self.client.zcard(keys.board(game, board)[0]))
        return total
