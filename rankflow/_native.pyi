"""Types of the Rust kernel built from native/ (native/src/python.rs)."""

MAX_ID_CHARS: int
MAX_POINTS: int
MAX_TIME: int

class ScoreChecker:
    def __init__(self, key: bytes | None) -> None: ...
    def check(self, raw: bytes) -> tuple[str, str, str, int, int, int] | tuple[str, str]: ...
    def parse(
        self, records: list[bytes], start: int, offsets: list[int] | None = None
    ) -> tuple[list[tuple[str, str, str, int, int, int, int, bytes]], list[tuple[int, str, str]]]: ...
