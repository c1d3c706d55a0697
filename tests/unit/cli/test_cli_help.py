"""Every ``rill`` subcommand's ``--help``: each option and argument says what it is for, descriptions are
whole sentences, and no reStructuredText markup (double backticks) reaches the terminal."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from rill.cli.main import SUBCOMMANDS, main


def _walk(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield from _walk(sub)


def _parser_of(
    command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[argparse.ArgumentParser, str]:
    """Run ``rill COMMAND --help`` and keep the parser that printed the help."""
    printed: list[argparse.ArgumentParser] = []
    original = argparse.ArgumentParser.print_help

    def record(self: argparse.ArgumentParser, file: object = None) -> None:
        printed.append(self)
        original(self, file)  # type: ignore[arg-type]

    monkeypatch.setattr(argparse.ArgumentParser, "print_help", record)
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert len(printed) == 1
    return printed[0], out


@pytest.mark.parametrize("command", list(SUBCOMMANDS))
def test_every_option_has_help_and_no_raw_markup(
    command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    top, out = _parser_of(command, monkeypatch, capsys)
    assert out.startswith("usage: rill " + command), out
    assert "``" not in out, out
    problems: list[str] = []
    for parser in _walk(top):
        text = parser.format_help()
        if "``" in text:
            problems.append(f"{parser.prog}: raw double backticks in its help")
        description = (parser.description or "").strip()
        if parser is top and (not description or description[-1] not in ".)"):
            problems.append(f"{parser.prog}: description is not a whole sentence: {description!r}")
        for action in parser._actions:
            if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
                continue
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:
                    if not (choice.help or "").strip():
                        problems.append(f"{parser.prog} {choice.dest}: no help")
                continue
            if not (action.help or "").strip():
                name = "/".join(action.option_strings) or str(action.metavar or action.dest)
                problems.append(f"{parser.prog} {name}: no help")
    assert not problems, "\n".join(problems)
