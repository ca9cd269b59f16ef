"""The products of the engine, one object each: what differs between the flows.

The write path (counter stage, merger, publisher) and the commands around it
(``run``, ``rebuild``, ``serve``, the readers) are shared; everything that depends on
which flow runs asks its :class:`Product` here instead of comparing flow names:

* its ``run``/``rebuild`` options (:attr:`Product.options`, shown grouped by product in
  ``--help``; another flow's options are refused) and their checks (:meth:`Product.check`);
* where it publishes (:meth:`Product.namespace`), its default K (:attr:`Product.k_max`) and
  read batch (:attr:`Product.read_batch`);
* its flow (:meth:`Product.build_flow`, which names its Redis state, whose snapshot type
  lists its gauges for ``operators.metrics``; a generation's keys are removed by their
  common prefix, so no product lists them);
* what its recovery directory records (:meth:`Product.layout`);
* what a rebuild checks before switching (:meth:`Product.rebuild_problem`);
* its summary line (:meth:`Product.counts`), its reader commands
  (:attr:`Product.readers`), its HTTP routes (:attr:`Product.routes`, those whose answers
  may be ready before a request among them: :meth:`Product.prepared`) and what ``rankflow
  serve`` runs beside them (:meth:`Product.serve_parts`: its readers' background parts,
  what ``/health`` and ``/metrics`` say of it).

The product modules import their flows, readers and routes when asked, so the
command line starts without importing every flow.

A new product is one module beside these three and one entry in :func:`_load`: a
:class:`Product` subclass naming its options (kept in ``RunOptions.extra`` when they
have no field there), its namespace, its checks, its layout, its flow builder, its
readers and routes by module name. What it names is its own code, as for the three:
its flow (``flows/``), its snapshot type with its ``gauges()`` and its Redis state
(``state/``, ``connectors/``), its reader command module and its API router module.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rankflow.errors import UsageError

if TYPE_CHECKING:
    import redis
    from bytewax.dataflow import Dataflow
    from bytewax.inputs import Source
    from bytewax.outputs import Sink
    from fastapi import APIRouter

    from rankflow.api.http_cache import Cacheable
    from rankflow.api.parts import Part
    from rankflow.api.prepared import PreparedRoute
    from rankflow.api.settings import Settings
    from rankflow.options import RunOptions

Command = Callable[[argparse.Namespace], int]
AddRedis = Callable[[argparse.ArgumentParser], None]


@dataclass(frozen=True)
class Option:
    """One command-line option of a product: ``flags`` as argparse takes them, ``dest`` the
    ``RunOptions`` field it sets (whose default is the option's), ``help`` (``%(default)s``
    is that default). ``resolve`` turns what was given (None: nothing) into the field's value
    for a run of the product, e.g. from an environment variable. ``note``: what a refusal
    of the option in another flow adds (why it is this product's)."""

    flags: tuple[str, ...]
    dest: str
    help: str
    type: Callable[[str], Any] | None = None
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    commands: tuple[str, ...] = ("run", "rebuild")
    resolve: Callable[[Any], Any] | None = None
    note: str = ""
    default: Any = None
    """The default of an option that is no ``RunOptions`` field (a new product's, kept in
    ``RunOptions.extra``); the field's default otherwise."""
    action: str | None = None
    """argparse's ``action`` (``store_true`` for a switch, which takes no value)."""

    def add_to(self, group: Any, default: Any, also: str = "") -> None:
        """Add to ``group`` with no default (``argparse.SUPPRESS``): what a command was given is what
        its namespace holds, so another flow's options can be told apart from their defaults."""
        text = self.help % {"default": default} + (f" (also {also})" if also else "")
        extra = {k: v for k, v in (("type", self.type), ("metavar", self.metavar), ("choices", self.choices),
                                   ("action", self.action)) if v is not None}
        group.add_argument(*self.flags, dest=self.dest, default=argparse.SUPPRESS, help=text, **extra)


class Product:
    """A product's defaults: a subclass overrides what its flow needs."""

    name: str = ""
    title: str = ""  # what it ranks, for --help
    options: tuple[Option, ...] = ()
    k_max: int = 100  # K_max when --k-max is not given
    read_batch: int | None = None
    """The most messages a Kafka partition reads at once when ``--read-batch`` is not given;
    None: the connector's ``BATCH_MESSAGES``. A flow whose steps gain nothing from larger
    batches keeps smaller ones (less memory in flight)."""
    readers: tuple[tuple[str, str, str], ...] = ()
    """Its reader commands: (module, command, handler); the module has ``add_parser(sub, add_redis)``."""
    routes: tuple[str, ...] = ()
    """The modules of its HTTP routes, each with a ``router``."""
    serves: str = ""
    """What its routes answer, in the API's summary (``/openapi.json``)."""

    def namespace(self, namespace: str) -> str:
        """Where it publishes for ``--namespace namespace``."""
        return namespace

    def check(self, opts: RunOptions) -> None:
        """Refuse (``UsageError``) values of its own options that it cannot run with."""

    def layout(self, opts: RunOptions) -> dict[str, Any]:
        """What its recovery directory records besides the shared layout (a resume must match it)."""
        return {}

    def warn(self, opts: RunOptions) -> None:
        """Say once at start what the run will not do (a boards run without a signing key)."""

    def must_republish(self, client: redis.Redis, opts: RunOptions, generation: int, fresh: bool,
                       floor: dict[str, int] | None = None) -> bool:
        """Whether a resumed run must send its whole state again from its first barrier: Redis lost
        it, or holds less than the run's recovery state has published (``floor``, see
        ``rankflow.resume_point``). Needed by a product whose first snapshot after a resume is
        not whole anyway."""
        return False

    def build_flow(self, opts: RunOptions, token: int, generation: int, live: bool, source: Source,
                   dead_letter: Sink, fresh: bool, republish: bool, floor: dict[str, int] | None = None) -> Dataflow:
        """The product's dataflow; ``floor``: what Redis must hold before its first changes apply
        (the publisher's, see ``sink``)."""
        raise NotImplementedError

    def sink(self, opts: RunOptions, token: int, generation: int, live: bool, state: Any,
             floor: dict[str, int] | None = None) -> Sink:
        """The publisher of its snapshots into its namespace; ``state``: what makes its Redis
        state (``RedisSnapshotSink``'s, one per sink partition); ``floor``: the positions Redis
        must hold before the run's first changes apply (``rankflow.resume_point``)."""
        from rankflow.connectors.redis_publish import RedisSnapshotSink

        return RedisSnapshotSink(opts.redis_url, opts.redis_namespace, token, generation, live, state=state,
                                 retry_for_s=opts.redis_retry_s, floor=floor)

    def layout_before(self) -> dict[str, Any]:
        """What a recovery directory made before a field of :meth:`layout` was recorded had for it:
        a resume whose layout differs from that is refused like any other change."""
        return {}

    @staticmethod
    def engine(opts: RunOptions, token: int) -> dict[str, Any]:
        """What every flow builder takes alike: its K, its run token, whether it is recoverable."""
        return {"k_max": opts.top_k, "run_token": token, "recoverable": opts.recovery_dir is not None}

    def rebuild_problem(self, final: dict[str, Any]) -> str | None:
        """What makes a rebuilt final snapshot unsound beyond errors (None: nothing)."""
        return None

    def counts(self, final: dict[str, Any]) -> str:
        """Its figures in the summary line of ``run`` and ``rebuild`` (empty, or ending with ``, ``)."""
        return ""

    def add_readers(self, sub: Any, add_redis: AddRedis) -> dict[str, Command]:
        """Add its reader commands to the command line (:attr:`readers`); their handlers by command name."""
        commands = {}
        for module_name, command, handler in self.readers:
            module = importlib.import_module(module_name)
            module.add_parser(sub, add_redis)
            commands[command] = getattr(module, handler)
        return commands

    def routers(self) -> list[APIRouter]:
        """Its HTTP routes (``rankflow serve``): the ``router`` of each module of :attr:`routes`."""
        return [importlib.import_module(name).router for name in self.routes]

    def prepared(self) -> list[PreparedRoute]:
        """Its routes whose answers may be ready before a request (``api.prepared``): the
        ``PREPARED`` of each module of :attr:`routes` that has one."""
        return [route for name in self.routes for route in getattr(importlib.import_module(name), "PREPARED", ())]

    def cacheable(self) -> list[Cacheable]:
        """Its routes whose answers come from one snapshot, and the snapshot the service holds for
        them (``api.http_cache``: validators, ``304``): the ``CACHEABLE`` of each module of
        :attr:`routes` that has one."""
        return [c for name in self.routes for c in getattr(importlib.import_module(name), "CACHEABLE", ())]

    def serve_parts(self, settings: Settings) -> list[Part]:
        """What ``rankflow serve`` runs for its routes (``api.parts``): built without I/O, started
        before the service answers, asked for ``/health`` and ``/metrics``."""
        return []


def _load() -> dict[str, Product]:
    from rankflow.products import activity, boards, listeners

    return {p.name: p for p in (listeners.PRODUCT, boards.PRODUCT, activity.PRODUCT)}


PRODUCTS: dict[str, Product] = _load()
"""Every product by its name (``--flow``), the default first."""
DEFAULT = next(iter(PRODUCTS))


def get(name: str) -> Product:
    """The product ``name``; a ``UsageError`` naming the choices for any other name."""
    try:
        return PRODUCTS[name]
    except KeyError:
        raise UsageError(f"--flow must be one of {', '.join(PRODUCTS)}, got {name!r}") from None


def owners() -> dict[str, list[Product]]:
    """Every product option's ``dest`` and the products that have it."""
    found: dict[str, list[Product]] = {}
    for product in PRODUCTS.values():
        for option in product.options:
            found.setdefault(option.dest, []).append(product)
    return found


def options_of(command: str) -> dict[str, Option]:
    """The products' options of ``command`` (``run``, ``rebuild``) by ``dest``, each once."""
    return {o.dest: o for p in PRODUCTS.values() for o in p.options if command in o.commands}


def refuse_foreign(flow: str, given: Iterable[str]) -> None:
    """Refuse (``UsageError``, one line) an option of another product given to a run of ``flow``:
    ignored, it would silently not do what its user meant."""
    product = get(flow)
    mine = {o.dest for o in product.options}
    for dest in given:
        holders = owners().get(dest)
        if holders is None or dest in mine:
            continue
        option = next(o for o in holders[0].options if o.dest == dest)
        flows = " or ".join(f"--flow {p.name}" for p in holders)
        raise UsageError(f"{option.flags[0]} is an option of {flows}{option.note}, not of --flow {flow}")


def product_values(flow: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """The ``RunOptions`` fields of ``flow``'s own options: what was given, resolved."""
    values: dict[str, Any] = {}
    for option in get(flow).options:
        value = given.get(option.dest)
        if option.resolve is not None:
            values[option.dest] = option.resolve(value)
        elif option.dest in given:
            values[option.dest] = value
    return values
