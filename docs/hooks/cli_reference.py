"""MkDocs hook: the ``lit-sb3`` command reference, generated from its argparse parsers.

A page holding ``<!-- cli-reference -->`` gets, in its place, one section per command with the command's full
``--help`` (usage, options, examples), so the reference never drifts from the parsers.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

PLACEHOLDER = "<!-- cli-reference -->"
#: The help's line width, fixed so the page does not depend on the terminal it is built in.
HELP_WIDTH = "100"


def command_parsers() -> dict[str, argparse.ArgumentParser]:
    """:return: The ``lit-sb3`` parser and each sub-command's, by command line."""
    from lit_sb3.cli import build_parser

    parser = build_parser()
    parsers = {"lit-sb3": parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            parsers |= {f"lit-sb3 {name}": sub for name, sub in action.choices.items()}
    return parsers


def cli_reference() -> str:
    """:return: The reference in Markdown: a heading and a help block per command."""
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_WIDTH
    try:
        sections = [
            f"## `{command}`\n\n```text\n{parser.format_help().rstrip()}\n```\n"
            for command, parser in command_parsers().items()
        ]
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous
    return "\n".join(sections)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """Replace the placeholder with the generated reference."""
    return markdown.replace(PLACEHOLDER, cli_reference()) if PLACEHOLDER in markdown else markdown
