"""``--kafka-config FILE``, ``-X KEY=VALUE`` and ``$RANKFLOW_KAFKA_CONFIG`` (rankflow.kafka_settings):
read, checked by librdkafka before anything connects, secrets never shown; the settings reach
the clients (SASL: the local broker has none usable, docs/operations.md, so librdkafka's own
SASL error shows they arrived). TLS against a real listener: tests/cli/test_kafka_tls.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rankflow.connectors.kafka import KafkaEndpoint
from rankflow.errors import UsageError
from rankflow.kafka_settings import CONFIG_ENV, KafkaSettings, load
from tests.cli.test_cli_mistakes import one_line

RANKFLOW = [sys.executable, "-m", "rankflow.cli"]
SECRET = "s3cr3t-Kafka-pw"
UNREACHABLE_REDIS = "redis://127.0.0.1:1/0"  # a refusal must come before Redis is asked anything


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != CONFIG_ENV}
    return subprocess.run([*RANKFLOW, *args], capture_output=True, text=True, timeout=120,
                          env={**environ, **(env or {})})


def commands(tmp_path) -> list[list[str]]:
    """Every command that talks to Kafka, each as it would start (the refusals come first)."""
    log = tmp_path / "e.jsonl"
    log.write_text("")
    run = ["--input", "kafka:127.0.0.1:1/t", "--redis", UNREACHABLE_REDIS, "--dead-letter", "kafka:127.0.0.1:1/d"]
    return [["run", *run, "--until-eof"], ["rebuild", *run],
            ["produce", "--input", str(log), "--kafka", "kafka:127.0.0.1:1/t", "--no-progress"],
            ["serve", "--kafka", "kafka:127.0.0.1:1/t", "--redis", UNREACHABLE_REDIS, "--port", "1"],
            ["status", "--input", "kafka:127.0.0.1:1/t", "--redis", UNREACHABLE_REDIS]]


def test_the_file_and_its_overrides(tmp_path):
    path = tmp_path / "client.properties"
    path.write_text("# a comment\n\n  security.protocol = SASL_SSL  \nsasl.mechanism=SCRAM-SHA-512\n"
                    f"sasl.username=svc\nsasl.password={SECRET}\nfetch.min.bytes=1\n   # indented comment\n")
    settings = load(str(path), [("fetch.min.bytes", "1024")], {})
    assert settings.as_dict() == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                                  "sasl.username": "svc", "sasl.password": SECRET, "fetch.min.bytes": "1024"}
    assert load(None, [], {CONFIG_ENV: str(path)}) == load(str(path), [], {})  # the variable is the default
    assert load(None, [], {CONFIG_ENV: ""}) == KafkaSettings()  # set empty: as unset
    assert load(None, [("linger.ms", "7")], {CONFIG_ENV: str(path)}).as_dict()["linger.ms"] == "7"
    for shown in (repr(settings), settings.described(), repr(KafkaEndpoint("b:9092", "t", settings))):
        assert SECRET not in shown and "svc" not in shown
    assert "sasl.password=***" in settings.described()
    assert settings.scrub(f"auth failed: {SECRET}") == "auth failed: ***"


@pytest.mark.parametrize("lines, words", [
    ("no.such.property=1\n", 'No such configuration property: "no.such.property"'),
    ("security.protocol=TLS\n", 'Invalid value "TLS" for configuration property "security.protocol"'),
    ("security.protocol=SSL\nssl.ca.location=/no/such/ca.pem\n", "ssl.ca.location failed"),
    ("bootstrap.servers=elsewhere:9092\n", "bootstrap.servers cannot be set"),
    ("acks=1\n", "acks cannot be set"),
    (f"{SECRET}\n", "line 1: expected KEY=VALUE"),
])
def test_settings_librdkafka_refuses_are_one_line_and_exit_2(tmp_path, lines, words):
    """Checked before anything connects or claims: Redis here is unreachable, and the status is
    still 2. Where the property came from is named; a line is named by its number, never shown.
    Every command for the first case; ``run`` for the others (each command costs a process)."""
    path = tmp_path / "client.properties"
    path.write_text(f"sasl.password={SECRET}\n" * ("line 1" not in words) + lines)
    every = commands(tmp_path)
    for command in every if "no.such.property" in lines else every[:1]:
        r = cli(*command, "--kafka-config", str(path))
        line = one_line(r)
        assert r.returncode == 2 and words in line and SECRET not in r.stderr + r.stdout, (command, line)
        assert "line" in line or "-X" in line or "--kafka-config" in line, line


def test_unreadable_files_and_bad_arguments_are_one_line_and_exit_2(tmp_path):
    missing = tmp_path / "missing.properties"
    for extra, env, words in ((["--kafka-config", str(missing)], {}, "--kafka-config"),
                              (["--kafka-config", str(tmp_path)], {}, "Is a directory"),
                              ([], {CONFIG_ENV: str(missing)}, f"${CONFIG_ENV} {missing}: cannot read it"),
                              (["-X", SECRET], {}, "expected KEY=VALUE"),
                              (["-X", "no.such=1"], {}, 'No such configuration property: "no.such"')):
        for command in commands(tmp_path)[2:3]:  # produce (the file test above takes every command)
            r = cli(*command, *extra, env=env)
            line = one_line(r)
            assert r.returncode == 2 and words in line and SECRET not in r.stderr, (command, extra, line)


def test_help_names_the_options_and_no_secret(tmp_path):
    path = tmp_path / "client.properties"
    path.write_text(f"sasl.password={SECRET}\n")
    for command in ("run", "rebuild", "produce", "serve", "status"):
        r = cli(command, "--help", env={CONFIG_ENV: str(path)})
        assert r.returncode == 0 and "--kafka-config FILE" in r.stdout and "-X KEY=VALUE" in r.stdout
        assert SECRET not in r.stdout and str(path) not in r.stdout


def test_sasl_settings_reach_librdkafka(tmp_path, kafka_brokers, topic):
    """The local broker has no usable SASL (docs/operations.md): a SASL client against its plaintext
    listener fails with librdkafka's own SASL error, which it can only give if the settings arrived;
    one line, exit 1, the password nowhere."""
    log = tmp_path / "e.jsonl"
    log.write_text('{"user_id": "u"}\n')
    path = tmp_path / "client.properties"
    path.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\nsasl.username=svc\n"
                    f"sasl.password={SECRET}\n")
    for command in (["produce", "--input", str(log), "--kafka", f"kafka:{kafka_brokers}/{topic}", "--no-progress"],
                    ["run", "--input", f"kafka:{kafka_brokers}/{topic}", "--until-eof", "--redis", UNREACHABLE_REDIS,
                     "--dead-letter", f"jsonl:{tmp_path / 'dead.jsonl'}"]):
        r = cli(*command, "--kafka-config", str(path), "-X", "sasl.username=other")
        line = one_line(r)
        assert r.returncode == 1 and "SASL SCRAM-SHA-256 mechanism handshake failed" in line, line
        assert SECRET not in r.stderr + r.stdout


def test_an_unknown_property_is_refused_without_the_command_line():
    with pytest.raises(UsageError, match="-X"):
        load(None, [("fetch.min.bytes", "lots")], {})


def test_the_sweeper_writes_with_the_runs_settings():
    """The sweeper's producer (connectors/timeout_producer.py) writes to the run's input, with its settings."""
    from rankflow.options import RunOptions
    from rankflow.products.listeners import sweeper_config

    settings = load(None, [("security.protocol", "SSL"), ("linger.ms", "3")], {})
    sweeper = sweeper_config(RunOptions(input="kafka:127.0.0.1:1/t", idle_timeout_ms=1000, kafka_settings=settings))
    assert sweeper is not None and sweeper.endpoint == KafkaEndpoint("127.0.0.1:1", "t", settings)
