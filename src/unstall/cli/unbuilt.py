"""Commands of parts that are not built yet: listed in --help, and say so when run (exit 2).

Each later issue replaces its entry here with the real command group.
"""

from __future__ import annotations

import typer

from unstall.cli.common import EXIT_USAGE, err_console


def add_unbuilt(app: typer.Typer, name: str, purpose: str, issue: str) -> None:
    """Register ``name`` as a command that accepts anything and explains it is not built yet."""

    def not_built(ctx: typer.Context) -> None:
        err_console.print(
            f"[bold yellow]unstall {name}[/] is not built yet ({issue}). "
            "Run `unstall --help` for what works today.",
            highlight=False,
        )
        raise typer.Exit(EXIT_USAGE)

    app.command(
        name,
        help=f"{purpose} (not built yet)",
        short_help=f"{purpose} (not built yet)",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
        add_help_option=False,
    )(not_built)
