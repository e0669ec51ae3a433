"""The command-line reference, generated from the command's own parser, so that it cannot drift from ``--help``.

Every subcommand of ``streamacc.cli.build_parser()`` gets its usage line (argparse's own,
at a fixed width), its help, and a table of every argument it takes, group by group,
mutually exclusive options said to be so; the recipes and their parameters come from the
recipes' own table.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator

WIDTH = "100"


@contextlib.contextmanager
def _columns() -> Iterator[None]:
    """argparse wraps usage at the terminal's width: fix it, so that the page is the same on every machine."""
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        yield
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


def _cell(text: object) -> str:
    """``text`` as a Markdown table cell: one line, its pipes and brackets taken literally."""
    parts = str(text).replace("\n", " ").split("`")
    for i in range(0, len(parts), 2):  # outside code spans
        for char in "\\[]*_":
            parts[i] = parts[i].replace(char, "\\" + char)
    return "`".join(parts).replace("|", "\\|")


def _names(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    value = ""
    if action.nargs != 0:
        value = " " + (action.metavar or action.dest.upper())
    return ", ".join(f"`{opt}{value}`" for opt in action.option_strings)


def _default(action: argparse.Action) -> str:
    if not action.option_strings or action.nargs == 0 or action.default in (None, argparse.SUPPRESS, [], False):
        return ""
    return f"`{action.default}`"


def _exclusive(parser: argparse.ArgumentParser) -> dict[int, str]:
    """For each option in a mutually exclusive group, the others it excludes."""
    out = {}
    for group in parser._mutually_exclusive_groups:
        for action in group._group_actions:
            others = [a.option_strings[-1] for a in group._group_actions if a is not action]
            out[id(action)] = ", ".join(f"`{o}`" for o in others)
    return out


def _table(parser: argparse.ArgumentParser, actions: list[argparse.Action]) -> list[str]:
    exclusive = _exclusive(parser)
    rows = ["| argument | default | description |", "|---|---|---|"]
    for action in actions:
        if isinstance(action, argparse._SubParsersAction):
            continue
        text = action.help or ""
        if isinstance(action, argparse._VersionAction):
            text = "print the version and exit"
        if id(action) in exclusive:
            text += f" (not with {exclusive[id(action)]})"
        rows.append(f"| {_names(action)} | {_default(action)} | {_cell(text)} |")
    return rows


def _subcommands(parser: argparse.ArgumentParser) -> tuple[argparse._SubParsersAction, dict[str, str]]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help or "" for choice in sub._choices_actions}
    return sub, helps


def _parser_section(name: str, parser: argparse.ArgumentParser, summary: str) -> list[str]:
    summary = summary[:1].upper() + summary[1:]
    lines = [f"## `{name}`", "", summary + ("" if summary.endswith(".") or not summary else "."), ""]
    lines += ["```text", parser.format_usage().strip(), "```", ""]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            commands = [f"| [`{name} {c.dest}`](#{name.replace(' ', '-')}-{c.dest}) | {_cell(c.help or '')} |"
                        for c in action._choices_actions]  # fmt: skip
            lines += ["**Commands**", "", "| command | what it does |", "|---|---|", *commands, ""]
    for group in parser._action_groups:
        actions = [a for a in group._group_actions if not isinstance(a, argparse._SubParsersAction)]
        if not actions:
            continue
        title = group.title or "arguments"
        title = {"positional arguments": "Arguments", "options": "Options"}.get(title, title[:1].upper() + title[1:])
        lines += [f"**{title}**", "", *_table(parser, actions), ""]
    return lines


def render_commands() -> str:
    """Markdown for the command and each of its subcommands."""
    from streamacc.cli import build_parser

    with _columns():
        parser = build_parser()
        sub, helps = _subcommands(parser)
        lines = _parser_section("streamacc", parser, parser.description or "")
        for name, subparser in sub.choices.items():
            lines += _parser_section(f"streamacc {name}", subparser, helps.get(name, ""))
    return "\n".join(lines)


def render_recipes() -> str:
    """Markdown for every recipe: what it computes and its parameters, as ``streamacc recipes`` lists them."""
    from streamacc.recipes import DEGENERATE_RULE, RECIPES, option

    lines = []
    for recipe in RECIPES.values():
        lines += [f"### `{recipe.name}`", "", _cell(recipe.description) + ".", ""]
        if recipe.params:
            lines += ["| option | kind | default | description |", "|---|---|---|---|"]
            for p in recipe.params:
                default = "required" if p.default is None else f"`{p.default}`"
                units = f" ({p.units})" if p.units else ""
                lines.append(f"| `{option(p.name)}` | {p.kind} | {default} | {_cell(p.help)}{units} |")
            lines.append("")
        for name, reason in recipe.refused:
            lines += [f"Refuses `{option(name)}`: {_cell(reason)}.", ""]
    lines += [DEGENERATE_RULE, ""]
    return "\n".join(lines)
