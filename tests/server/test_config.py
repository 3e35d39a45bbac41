"""Issue 28, point 6: the server's options are declared once, in ServerConfig."""

import dataclasses
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from aiorest import App, Server
from aiorest.cli import _parser
from aiorest.cli.options import COMMAND_LINE_FLAGS
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
    assert dests == with_flag | set(COMMAND_LINE_FLAGS)
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
    for name, flag in [*((option.name, flag) for option, flag in flags()), *COMMAND_LINE_FLAGS.items()]:
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
