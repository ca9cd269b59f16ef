"""Path parameters for ids that may hold ``/``: ``{game:game}``, ``{workspace:workspace}``, and
``{player_id:rest}``, the rest of a path.

Contract: an id parameter matches the shortest part of the path that the route's rest
still fits, as is (``%2F`` arrives decoded as ``/``); see ``api.boards`` and
``api.activity`` for what that means for their routes. Ids may hold any character, a line
break (``%0A``) too: the regexes match it (``.`` alone, and Starlette's ``{x:path}``, would
not, and such an id would reach no route).
"""

from __future__ import annotations

from starlette.convertors import Convertor, register_url_convertor


class IdConvertor(Convertor[str]):
    """An id as it stands in the path, matched by its class's ``regex`` (lazy: the shortest
    that fits). Starlette reads ``regex`` as a class attribute: one subclass per id."""

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


def register_id(name: str, regex: str) -> None:
    """Make ``{param:name}`` an id matched by ``regex`` in every route."""
    class Id(IdConvertor):
        pass

    Id.regex = f"(?s:{regex})"
    register_url_convertor(name, Id())


register_id("rest", ".*")  # as Starlette's ``{x:path}``, line breaks too
