"""The Kafka client settings a user gives: ``--kafka-config FILE``, ``-X KEY=VALUE`` and ``$RANKFLOW_KAFKA_CONFIG``.

A secured cluster needs what only its operator knows (``security.protocol``, ``sasl.*``,
``ssl.*``), and a busy one tuning (``fetch.min.bytes``, ``linger.ms``): these are
librdkafka's own properties, taken as they are, so that what a managed service
documents for its clients works here unchanged. Every consumer, producer and admin
client a command makes gets them (``connectors.kafka.client_config`` merges
:class:`KafkaSettings`, which each :class:`~rankflow.connectors.kafka.KafkaEndpoint` carries).

They are checked before a command touches any service: the file must be readable, each
line ``KEY=VALUE``, and librdkafka itself must accept the whole set (a client is
configured, without brokers, so nothing connects): an unknown property or a bad value
is one line and exit 2, never a failure deep inside a run.

A few properties are rankflow's to set, because its guarantees depend on them (where
the brokers are, ``acks=all`` with idempotence, no consumer group, no silent offset
reset): they are refused rather than silently overridden either way.

**Secrets** (passwords, SASL credentials, OAuth secrets, key material) never reach a
message: :meth:`KafkaSettings.__repr__` and :meth:`KafkaSettings.described` show them
as ``***``, and :meth:`KafkaSettings.scrub` takes their values out of any text (what
librdkafka says, which a command prints) before it is shown.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from rankflow.errors import UsageError

CONFIG_ENV = "RANKFLOW_KAFKA_CONFIG"
"""The default of ``--kafka-config``: a file of settings every command that talks to Kafka reads."""

OWNED = {
    "bootstrap.servers": "the brokers are the kafka:HOST:PORT/TOPIC address's",
    "metadata.broker.list": "the brokers are the kafka:HOST:PORT/TOPIC address's",
    "group.id": "rankflow reads partitions by assignment, in no consumer group",
    "enable.auto.commit": "positions live in the recovery store, never committed to Kafka",
    "auto.offset.reset": "a position outside the log stops the run, never a silent jump",
    "enable.partition.eof": "a bounded read (--until-eof) needs the partition's end",
    "acks": "every write is acknowledged by all replicas (acks=all)",
    "enable.idempotence": "every write is idempotent (no duplicates on retries)",
    "transactional.id": "rankflow's producers are not transactional",
}
"""The properties rankflow sets itself, with why: refused in a user's settings."""

SECRET_WORDS = ("password", "secret", "token")
SECRET_NAMES = frozenset({"sasl.username", "ssl.key.pem", "ssl_key"})
SECRET_PREFIXES = ("sasl.oauthbearer.",)
MASK = "***"
_SCRUB_AT_LEAST = 3  # a value shorter than this is not looked for in text: it would mask every such letter


def is_secret(name: str) -> bool:
    """Whether a property's value must never be shown: passwords and secrets of every kind, the SASL
    user name, OAuth settings (a client secret, a token endpoint's extensions) and a key inline.

    >>> [is_secret(n) for n in ("sasl.password", "ssl.key.password", "sasl.oauthbearer.client.secret",
    ...                         "sasl.username", "ssl.ca.location", "security.protocol")]
    [True, True, True, True, False, False]
    """
    lowered = name.lower()
    return (any(word in lowered for word in SECRET_WORDS) or lowered in SECRET_NAMES
            or lowered.startswith(SECRET_PREFIXES))


@dataclass(frozen=True, repr=False)
class KafkaSettings:
    """librdkafka properties as ``(name, value)`` pairs, in the order they apply (later wins).

    Frozen and hashable: an endpoint carrying them stays a dictionary key (one sweeper
    producer per endpoint). Its ``repr`` masks secrets, so a log of an endpoint is safe.
    """

    properties: tuple[tuple[str, str], ...] = ()

    def as_dict(self) -> dict[str, str]:
        """The properties as a client configuration takes them."""
        return dict(self.properties)

    def __bool__(self) -> bool:
        return bool(self.properties)

    def described(self) -> str:
        """``name=value, ...`` with every secret's value masked, for a message or a log.

        >>> KafkaSettings((("security.protocol", "SASL_SSL"), ("sasl.password", "hunter22"))).described()
        'security.protocol=SASL_SSL, sasl.password=***'
        """
        return ", ".join(f"{k}={MASK if is_secret(k) else v}" for k, v in self.as_dict().items())

    def __repr__(self) -> str:
        return f"KafkaSettings({self.described()})"

    def secrets(self) -> list[str]:
        """The secret values, longest first (so one that contains another is masked whole)."""
        values = {v for k, v in self.properties if is_secret(k) and len(v) >= _SCRUB_AT_LEAST}
        return sorted(values, key=len, reverse=True)

    def scrub(self, text: str) -> str:
        """``text`` with every secret value of these settings replaced by ``***``.

        >>> KafkaSettings((("sasl.password", "hunter22"),)).scrub("auth failed for hunter22")
        'auth failed for ***'
        """
        for value in self.secrets():
            text = text.replace(value, MASK)
        return text


NO_SETTINGS = KafkaSettings()


def x_option(text: str) -> tuple[str, str]:
    """``-X KEY=VALUE``'s argument type. The refusal never repeats the argument: it may be a secret.

    >>> x_option("security.protocol=SSL")
    ('security.protocol', 'SSL')
    >>> x_option("sasl.password")
    Traceback (most recent call last):
    argparse.ArgumentTypeError: expected KEY=VALUE, a librdkafka property such as security.protocol=SSL
    """
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError("expected KEY=VALUE, a librdkafka property such as security.protocol=SSL")
    return key.strip(), value.strip()


def read_file(path: str, option: str) -> list[tuple[str, str, str]]:
    """The ``(name, value, where)`` of each ``KEY=VALUE`` line of ``path``: blank lines and lines
    starting with ``#`` are skipped, spaces around the name and the value are dropped. A refusal
    names the line by its number, never by its text (it may hold a password)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{option} {path}: cannot read it: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{option} {path}: not a text file (UTF-8 expected)") from None
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        key, sep, value = stripped.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{option} {path} line {number}: expected KEY=VALUE (a librdkafka property; "
                             "# starts a comment)")
        found.append((key.strip(), value.strip(), f"{option} {path} line {number}"))
    return found


def load(config: str | None, overrides: Iterable[tuple[str, str]], environ: Mapping[str, str]) -> KafkaSettings:
    """The settings of a command: the file ``config`` (``--kafka-config``, else ``$RANKFLOW_KAFKA_CONFIG``
    if set), then ``overrides`` (``-X``, which win), checked as the module says."""
    if config is None and environ.get(CONFIG_ENV):
        config, option = environ[CONFIG_ENV], f"${CONFIG_ENV}"
    else:
        option = "--kafka-config"
    if config == "":
        raise UsageError("--kafka-config: expected the path of a file of KEY=VALUE lines, got an empty one")
    given = read_file(config, option) if config is not None else []
    given += [(key, value, "-X") for key, value in overrides]
    where = {key: origin for key, _, origin in given}
    properties = {key: value for key, value, _ in given}
    settings = KafkaSettings(tuple(properties.items()))
    for key in properties:
        if key in OWNED:
            raise UsageError(f"{where[key]}: {key} cannot be set: {OWNED[key]}")
    return check_with_librdkafka(settings, where)


_NAMED = re.compile(r'property:? "([^"]+)"|^(\S+) failed')
_IGNORED = "will be ignored by this"


def check_with_librdkafka(settings: KafkaSettings, where: Mapping[str, str] | None = None) -> KafkaSettings:
    """``settings`` once librdkafka accepted them as a producer's and a consumer's configuration: no
    property it does not know, no value it cannot take, key and certificate files it can load.
    Clients are configured without brokers, so nothing connects; each is closed at once. What
    librdkafka only warns of (a consumer's property given to a producer, which ignores it) is
    not refused: one file serves every command."""
    if not settings:
        return settings
    from confluent_kafka import Consumer, KafkaException, Producer

    for make, own in ((Producer, {}), (Consumer, {"group.id": "rankflow-check"})):
        try:
            client = make({**settings.as_dict(), **own, "logger": _Unheard()})
        except KafkaException as exc:
            raise UsageError(_refusal(settings, exc.args[0].str(), where)) from None
        except (TypeError, ValueError) as exc:
            raise UsageError(_refusal(settings, str(exc), where)) from None
        if isinstance(client, Consumer):
            client.close()
        del client
    return settings


class _Unheard:
    """The checking clients' log: their warnings (a property the other kind of client ignores) are
    no news to the user, who meant the file for every command."""

    def log(self, level: int, fmt: str, *args: object) -> None:
        pass


def _refusal(settings: KafkaSettings, said: str, where: Mapping[str, str] | None) -> str:
    """librdkafka's refusal, secrets masked, naming where the property it names was given."""
    said = settings.scrub(said).removeprefix("Failed to create producer: ").removeprefix("Failed to create consumer: ")
    named = _NAMED.search(said)
    origin = (where or {}).get(named.group(1) or named.group(2)) if named else None
    return f"Kafka settings ({origin or '--kafka-config / -X'}): {said}"


def add_options(p: argparse.ArgumentParser) -> None:
    """``--kafka-config`` and ``-X`` on a command that talks to Kafka."""
    group = p.add_argument_group("Kafka client settings", "librdkafka properties for every consumer, producer "
                                 "and admin client of the command: TLS, SASL, tuning (docs/operations.md, "
                                 "Connecting to a secured cluster)")
    group.add_argument("--kafka-config", metavar="FILE",
                       help=f"KEY=VALUE lines, # comments (default: ${CONFIG_ENV}, if set)")
    group.add_argument("-X", dest="kafka_set", action="append", type=x_option, default=[], metavar="KEY=VALUE",
                       help="one property; repeatable; wins over the file")


def from_args(args: argparse.Namespace, environ: Mapping[str, str]) -> KafkaSettings:
    """The settings ``add_options`` read, loaded and checked (:func:`load`)."""
    return load(args.kafka_config, args.kafka_set, environ)
