"""`unstall demo`: each built part at work on the embedded default data, in a few minutes."""

from __future__ import annotations

from unstall.cli.common import QuietOpt, console


def demo(quiet: QuietOpt = False) -> None:
    """Show each built part at work on the embedded default data."""
    console.rule("unstall demo")
