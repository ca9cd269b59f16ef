"""The two kinds of failure the command line turns into exit statuses.

In a module of their own so that every layer (options, products, connectors of the
command line) can raise them without importing the others.
"""

from __future__ import annotations


class UsageError(ValueError):
    """Bad options: the CLI prints the message and exits with status 2."""


class ServiceError(RuntimeError):
    """A service the run needs (Redis, a broker) is unreachable or refused it."""
