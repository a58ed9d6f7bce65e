"""docs/cli.md describes the command line `python -m playground` actually has: every registered command (and
sub-command) and every flag, nothing that is not registered, and every field `generate --json` writes.

The parser is the one `main()` builds (caught as it calls `parse_args`), so a command registered in __main__.py is
seen here without this test naming it. Nothing runs a model: `generate` runs on a stand-in backend."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from playground import generate as generate_module
from playground.__main__ import main
from playground.engine import StepEvent

ROOT = Path(__file__).resolve().parents[2]
CLI_DOC = ROOT / "docs" / "cli.md"
JSON_HEADING = "`--json` schema"
COUNTS = {5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine", 10: "ten", 11: "eleven", 12: "twelve"}

# Flags the page need not name, each with its reason. Prefer documenting a flag to listing it here.
UNDOCUMENTED: dict[str, str] = {
    "--help": "argparse's own, on every command and sub-command",
}


class _Parser(Exception):
    """Carries the parser out of main() at the moment it would parse."""


def build_parser() -> argparse.ArgumentParser:
    """The parser `python -m playground --help` uses: main() builds it; this stops main() at parse_args."""

    def grab(self: argparse.ArgumentParser, *args, **kwargs):
        raise _Parser(self)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(argparse.ArgumentParser, "parse_args", grab)
        with pytest.raises(_Parser) as caught:
            main(["--help"])
    return caught.value.args[0]


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The parser's sub-commands by name ({} for a parser without any)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def long_flags(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings if option.startswith("--")}


def sections(text: str) -> dict[str, str]:
    """The page's `## ` sections: heading as written -> body."""
    parts = re.split(r"^## +(.+?) *$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def command_sections(text: str) -> dict[str, str]:
    """The sections headed by a name in backticks and nothing else (`## \\`generate\\``): name -> body."""
    return {match.group(1): body for heading, body in sections(text).items()
            if (match := re.fullmatch(r"`([^`]+)`", heading))}


def table_rows(body: str) -> list[list[str]]:
    """The cells of every row of every table in `body`, each table's header and rule rows left out."""
    rows, in_table = [], False
    for line in body.splitlines():
        if not line.startswith("|"):
            in_table = False
            continue
        if re.fullmatch(r"[|\-\s:]+", line):
            continue
        if in_table:
            rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip().strip("|"))])
        in_table = True  # a table's first row is its header
    return rows


def row_names(body: str) -> dict[str, str]:
    """Rows whose first cell opens with a name in backticks: that name -> the rest of the row."""
    return {match.group(1): " | ".join(cells[1:]) for cells in table_rows(body)
            if (match := re.match(r"`([\w-]+)`", cells[0]))}


def named(flag: str, text: str) -> bool:
    """`flag` appears in `text` as itself (`--k` is not found in `--kv`)."""
    return re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text) is not None


def flags_in(text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", text))


def missing_flags(parser: argparse.ArgumentParser, text: str) -> list[str]:
    return sorted(flag for flag in long_flags(parser) - set(UNDOCUMENTED) if not named(flag, text))


PARSER = build_parser()
COMMANDS = subcommands(PARSER)
DOC = CLI_DOC.read_text()


def command_problems(doc: str) -> list[str]:
    """What `doc` gets wrong about the commands: one missing from its table or without a section of its own, one
    named that is not registered, and the count it gives."""
    table, headed = row_names(sections(doc).get("Commands", "")), command_sections(doc)
    problems = [f"the commands table does not name {name!r}" for name in sorted(set(COMMANDS) - set(table))]
    problems += [f"no section headed `{name}`" for name in sorted(set(COMMANDS) - set(headed))]
    problems += [f"{name!r} is named but not registered" for name in sorted((set(table) | set(headed)) - set(COMMANDS))]
    said = re.search(r"has (\w+) commands", doc)
    if not said or said.group(1) != COUNTS.get(len(COMMANDS), str(len(COMMANDS))):
        problems.append(f"the page's count of commands ({said and said.group(1)}) is not {len(COMMANDS)}")
    return problems


def flag_problems(doc: str, command: str) -> list[str]:
    """What `doc`'s section on `command` gets wrong about its flags (for a command with sub-commands, about its
    table: one row per sub-command, each naming that sub-command's flags)."""
    body, parser = command_sections(doc).get(command, ""), COMMANDS[command]
    stages = subcommands(parser)
    if not stages:
        problems = [f"`{command}` does not name {flag}" for flag in missing_flags(parser, body)]
        stale = flags_in(" ".join(cells[0] for cells in table_rows(body))) - long_flags(parser)
        return problems + [f"`{command}` names {flag}, not its flag" for flag in sorted(stale)]
    rows = row_names(body)
    problems = [f"`{command}` has no row for {name!r}" for name in sorted(set(stages) - set(rows))]
    problems += [f"`{command}` has a row for {name!r}, not registered" for name in sorted(set(rows) - set(stages))]
    for name in sorted(set(stages) & set(rows)):
        problems += [f"`{command} {name}` does not name {flag}" for flag in missing_flags(stages[name], rows[name])]
        problems += [f"`{command} {name}` names {flag}, not its flag"
                     for flag in sorted(flags_in(rows[name]) - long_flags(stages[name]))]
    return problems


def without_lines(doc: str, text: str) -> str:
    return "\n".join(line for line in doc.splitlines() if text not in line)


def test_the_parser_is_the_entry_points() -> None:
    """The capture caught main()'s parser, whole: its commands, and their own flags."""
    assert {"generate", "serve", "train", "bench"} <= set(COMMANDS)
    assert {"--json", "--k", "--tree-depth"} <= long_flags(COMMANDS["generate"])


def test_every_command_is_named_and_no_other() -> None:
    problems = command_problems(DOC)
    assert not problems, f"docs/cli.md: {problems}"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_flag_is_named_in_its_section(command: str) -> None:
    problems = flag_problems(DOC, command)
    assert not problems, f"docs/cli.md: {problems}"


def test_the_checks_can_fail() -> None:
    """Negative controls: a page that loses a command, miscounts, names one too many, or loses a flag or a stage."""
    assert command_problems(without_lines(DOC, "| `space` |")) == ["the commands table does not name 'space'"]
    assert command_problems(DOC.replace(f"has {COUNTS[len(COMMANDS)]} commands", "has six commands")) == \
        [f"the page's count of commands (six) is not {len(COMMANDS)}"]
    assert command_problems(DOC + "\n## `chat`\n") == ["'chat' is named but not registered"]
    assert flag_problems(without_lines(DOC, "`--no-instrument`"), "generate") == \
        ["`generate` does not name --no-instrument"]
    assert flag_problems(without_lines(DOC, "| `merge` |"), "train") == ["`train` has no row for 'merge'"]
    assert flag_problems(DOC.replace("`--alpha`", "`--beta`"), "train") == \
        ["`train merge` does not name --alpha", "`train merge` names --beta, not its flag"]


class _StandIn:
    """A backend with no model behind it: a prefill and one drafting step."""

    name, exact_speculation = "local", True

    @property
    def preset(self):
        from playground.presets import get_preset

        return get_preset("smollm2-135m")

    def encode(self, messages: list[dict], chat_template: str | None = None, raw: bool = False) -> list[int]:
        return [1, 2, 3]

    def decode(self, ids: list[int]) -> str:
        return " ".join(map(str, ids))

    def stream(self, prompt_ids: list[int], drafter: str, cfg, should_stop=None, session: str | None = None):
        yield StepEvent(step=0, drafted=[], accepted=0, emitted=[5], total_tokens=1, elapsed_ms=1.0)
        yield StepEvent(step=1, drafted=[6, 7], accepted=1, emitted=[6, 8], total_tokens=3, elapsed_ms=2.0,
                        finished=True, finish_reason="length")


def test_every_json_field_is_in_the_schema_table(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """The fields `generate --json` prints (top level, and one level down), from generate() itself."""
    monkeypatch.setattr(generate_module, "make_backend", lambda args, preset: _StandIn())
    generate_module.generate(PARSER.parse_args(["generate", "--preset", "smollm2-135m", "--prompt", "hi", "--json",
                                    "--max-new-tokens", "3", "--tree-nodes", "4"]))
    record = json.loads(capsys.readouterr().out)
    fields = {"top level": set(record), "config": set(record["config"]), "tree": set(record["tree"]),
              "metrics": set(record["metrics"]), "steps": set(record["steps"][0])}
    assert {"tree", "kernels"} <= fields["top level"] and "tree_path" in fields["steps"], fields
    table = " ".join(" | ".join(cells) for cells in table_rows(sections(DOC)[JSON_HEADING]))
    missing = {where: sorted(name for name in names if f"`{name}`" not in table) for where, names in fields.items()}
    missing = {where: names for where, names in missing.items() if names}
    assert not missing, f"docs/cli.md's --json table does not name {missing}"
