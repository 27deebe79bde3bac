"""Decimal digit strings in input text."""

from __future__ import annotations


def ascii_digits(text: str) -> bool:
    """Whether ``text`` is one or more of the characters 0-9. ``str.isdigit`` also takes
    other digits, such as "²", which ``int`` refuses: a reader that checked with it raised a
    ``ValueError`` traceback instead of its own error."""
    return text.isascii() and text.isdigit()
