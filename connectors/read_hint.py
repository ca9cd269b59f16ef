"""Where a product's state is now, as a reader last learnt it: :class:`GenerationHint`.

Contract: a reader keeps the keys of its product's namespace and the generation it last
saw current (0 before it learnt any), and reads that generation's keys. It is only
ever a hint: every read script (and the version watchers' reads) checks it against the
generation key and says where the state moved (a rebuild switched generations), and
the reader takes that as its new hint (:meth:`GenerationHint.moved`). A product's
reader adds what else it learns the same way (the boards' aliases, the activity
rankings' snapshot document).
"""

from __future__ import annotations

from rankflow.connectors.redis_keys import Keys


class GenerationHint:
    """A reader's guess of its product's current generation, with the product's keys."""

    def __init__(self, keys: Keys) -> None:
        self.keys = keys
        self.generation = 0

    def moved(self, generation: int) -> bool:
        """Take ``generation`` as the current one; True if it differs from the guess."""
        if generation == self.generation:
            return False
        self.generation = generation
        return True
