"""Argument types of the command line: what argparse turns into a one-line refusal.

In a module of their own so that the products (``rankflow.products``) can declare
their options without importing the command line.
"""

from __future__ import annotations

import argparse


def positive(text: str) -> int:
    return _integer(text, 1)


def not_negative(text: str) -> int:
    return _integer(text, 0)


def _integer(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be >= {least}, got {value}")
    return value


def port(text: str) -> int:
    """A TCP port: 1 to 65535 (a server given more would listen elsewhere, or fail deep inside)."""
    value = positive(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be 1 to 65535, got {value}")
    return value


def rate(text: str) -> float:
    """A probability per event: 0 to 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be 0 to 1, got {value}")
    return value


def comma_list(text: str) -> list[str]:
    """``a,b,,c`` -> ``['a', 'b', 'c']``."""
    return [s for s in text.split(",") if s]
