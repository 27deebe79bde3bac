"""MkDocs hook: the command reference (``reference/cli.md``) is made from the ``tacit`` command
itself when the site is built, so that it says what the installed commands take."""

from __future__ import annotations

from typing import Any

MARK = "<!-- the commands -->"


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if MARK not in markdown:
        return markdown
    import typer
    from typer.cli import get_docs_for_click

    from tacit.cli.main import app

    command = typer.main.get_command(app)
    text = get_docs_for_click(obj=command, ctx=typer.Context(command), name="tacit", indent=1)
    return markdown.replace(MARK, text)
