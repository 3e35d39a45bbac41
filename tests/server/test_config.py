"""Issue 28, point 6: the server's options are declared once, in ServerConfig."""

import dataclasses
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from aiorest import App, Limits, Server
from aiorest.cli import _parser
from aiorest.cli.options import COMMAND_LINE_FLAGS, LIMIT_FLAGS, config_from
from aiorest.server import ServerConfig, run
from aiorest.server.config import flags

FIELDS = [option.name for option in dataclasses.fields(ServerConfig)]


def keywords(function):
    return [p.name for p in inspect.signature(function).parameters.values() if p.kind is p.KEYWORD_ONLY]


def test_run_and_server_take_exactly_the_fields_as_keywords():
    assert keywords(Server) == FIELDS
    assert keywords(run) == [*FIELDS, "ready", "startup_failed"]  # run's own: callbacks, not configuration
    for parameter in keywords(Server):
        field_default = ServerConfig.__dataclass_fields__[parameter].default
        assert inspect.signature(Server).parameters[parameter].default == field_default


def test_the_command_line_has_a_flag_per_field_or_says_why_not():
    run_parser = _parser()._subparsers._group_actions[0].choices["run"]
    dests = {action.dest for action in run_parser._actions} - {"help", "app"}
    with_flag = {option.name for option, _ in flags()}
    assert dests == with_flag | set(COMMAND_LINE_FLAGS) | set(LIMIT_FLAGS)
    for option in dataclasses.fields(ServerConfig):
        assert (option.name in with_flag) != bool(option.metadata["why_not"]), option.name


def test_help_names_every_flag_and_its_environment_variable():
    help_text = subprocess.run(
        [sys.executable, "-m", "aiorest", "run", "--help"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COLUMNS": "1000"},
    ).stdout
    help_text = " ".join(help_text.split())
    every = [*((option.name, flag) for option, flag in flags()), *COMMAND_LINE_FLAGS.items(), *LIMIT_FLAGS.items()]
    for name, flag in every:
        assert "--" + name.replace("_", "-") in help_text
        assert flag.help in help_text, name
        if flag.env:
            assert f"${flag.env}" in help_text, name


@pytest.mark.parametrize("variable, value, field, expected", [
    ("AIOREST_HEALTH", "yes", "health", True),
    ("AIOREST_MAX_CONCURRENCY", "8", "max_concurrency", 8),
    ("AIOREST_ACCESS_LOG_FORMAT", "json", "access_log_format", "json"),
    ("AIOREST_QUEUE_TIMEOUT", "0.5", "queue_timeout", 0.5),
])  # fmt: skip
def test_environment_variables_give_the_defaults_and_flags_win(monkeypatch, variable, value, field, expected):
    from aiorest.cli.options import config_from

    monkeypatch.setenv(variable, value)
    config = config_from(_parser().parse_args(["run", "x:y"]))
    assert getattr(config, field) == expected
    assert config.workers == 1  # no --workers: one process
    assert config_from(_parser().parse_args(["run", "x:y", "--workers", "3"])).workers == 3


async def test_keywords_replace_the_fields_of_a_config():
    config = ServerConfig(port=0, server_header="from-config", health=True)
    server = Server(App(), config, server_header="keyword")
    assert server.config == dataclasses.replace(config, server_header="keyword")
    assert server.health is not None and server.port == 0


def test_an_unknown_option_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match=r"Server\(\) got unexpected keyword argument\(s\): prot"):
        Server(App(), prot=8080)
    with pytest.raises(ValueError, match="workers must be at least 1"):
        ServerConfig(workers=0)


def test_the_option_table_in_the_docs_has_a_row_per_field_with_its_flag_and_variable():
    rows = {}
    for line in (Path(__file__).parents[2] / "docs" / "server.rst").read_text().splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if cells and re.fullmatch(r"``\w+``", cells[0]) and cells[0].strip("`") in FIELDS:
            rows[cells[0].strip("`")] = line
    assert list(rows) == FIELDS
    for option, flag in flags():
        assert "``--" + option.name.replace("_", "-") in rows[option.name], option.name
        assert flag.env is None or f"``{flag.env}``" in rows[option.name], option.name


def test_every_limit_is_a_flag_and_an_environment_variable_over_the_apps_limits(monkeypatch):
    # Issue 34, point 2: Limits were settable only in code.
    assert set(LIMIT_FLAGS) == {option.name for option in dataclasses.fields(Limits)}
    monkeypatch.setenv("AIOREST_BODY_TIMEOUT", "5")
    config = config_from(_parser().parse_args(["run", "x:y", "--max-body-size", "2048"]))
    assert config.limit_overrides == {"body_timeout": 5.0, "max_body_size": 2048}
    app = App(limits=Limits(max_headers=7, body_timeout=30))
    limits = Server(app, config).limits
    assert (limits.max_headers, limits.body_timeout, limits.max_body_size) == (7, 5.0, 2048)
    monkeypatch.delenv("AIOREST_BODY_TIMEOUT")
    assert config_from(_parser().parse_args(["run", "x:y"])).limit_overrides is None


def test_a_limit_out_of_range_is_refused_with_a_message(capsys):
    with pytest.raises(SystemExit, match="max_body_memory"):
        config_from(_parser().parse_args(["run", "x:y", "--max-body-size", str(128 * 1024 * 1024)]))
    with pytest.raises(SystemExit):
        _parser().parse_args(["run", "x:y", "--max-headers", "0"])
    assert "--max-headers: must be at least 1, got 0" in capsys.readouterr().err
    with pytest.raises(ValueError, match="no such limit"):
        ServerConfig(limit_overrides={"max_bodies": 1})


@pytest.mark.parametrize("given", [["--port", "9000"], ["--host", "0.0.0.0"]])
def test_host_or_port_with_unix_is_refused(given):
    # Issue 34, point 11: --port with --unix was silently ignored.
    with pytest.raises(SystemExit, match="--unix serves on a unix socket"):
        config_from(_parser().parse_args(["run", "x:y", "--unix", "/tmp/a.sock", *given]))
    config = config_from(_parser().parse_args(["run", "x:y", "--unix", "/tmp/a.sock"]))
    assert config.unix == "/tmp/a.sock" and (config.host, config.port) == ("127.0.0.1", 8080)
    assert config_from(_parser().parse_args(["run", "x:y", *given])).unix is None
