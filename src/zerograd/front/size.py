"""How much text each parser is given at once (issue 43): a statement too large is a ZG900 that
says so, before a parser spends gigabytes on it, never a false "invalid syntax".

What a parse costs grows with the tokens of the statement, not its bytes: measured on
CPython 3.11, LibCST 1.9 (one statement parsed alone, peak RSS over the process's; `x = [...]`
of 200 KB each, and the largest top-level statements of the packages in our venv):

| statement | bytes/token | LibCST B/token, us/token | CPython ast B/token, us/token |
|---|---|---|---|
| `[1, 1, …]`, `[1,1,…]`, `['ab', …]` | 1-3 | 2,010-2,194, 12-17 | 496-554, 1.4 |
| `[f(x), …]`, `[a[1], …]`, `[a.b.c, …]` | 1.2 | 2,793-3,520, 21-27 | 446-587, 1.3-1.8 |
| training methods in a class | 4.7 | 2,110, 14 | 646, 2.0 |
| mypy's `TypeChecker` class (389 KB) | 9 | 2,721, 16 | 569, 2.5 |

Per byte the same statements differ thirtyfold (a docstring is one token), so the limits are
in tokens, counted by a regex that takes a string or a comment as one (0.35 us a token, and
only for texts with more bytes than the limit has tokens: a token is at least a byte).
"""

from __future__ import annotations

import re
from typing import Optional

# What LibCST is given at once (one top-level statement, its unused bodies cut): at the worst
# density above, 120,000 tokens cost 420 MiB and 3.3 s (real code: 250-330 MiB, 2 s), and the
# largest top-level statement we found in real code holds 45,000 (mypy's TypeChecker). A whole
# CLI run on a file holding `x = [f(x), …]` of 117,500 tokens and a training loop: 5.5 s and
# 413 MiB peak with --format github (10 s, 430 MiB in text, whose fix descriptions lint twice).
STATEMENT_TOKENS = 120_000
# What CPython's parser is given at once (before the cut): it costs a quarter of LibCST's per
# token (about 600 bytes), so four times as many (290 MiB, 1 s); a function larger than that
# is cut before LibCST sees it, but CPython must read it first.
LINE_TOKENS = 4 * STATEMENT_TOKENS

_TOKEN = re.compile(
    r"""[rRbBuUfF]{0,2}(?:'''(?:[^'\\]|\\.|'(?!''))*'''|\"\"\"(?:[^"\\]|\\.|"(?!""))*\"\"\""""
    r"""|'(?:[^'\\\r\n]|\\.)*'|"(?:[^"\\\r\n]|\\.)*")|#[^\r\n]*|\w+|[^\s\w]""")
# Where a line starts that is not indented (nor a blank line's spaces): every top-level
# statement starts at one, so the text between two of them lies within one statement. A
# pattern that starts with a literal is searched for twelve times faster: the one that also
# ends lines at a lone CR only where there is one.
_FLUSH = re.compile(r"\n(?=[^ \t\r\n])")
_FLUSH_CR = re.compile(r"[\r\n](?=[^ \t\r\n])")
_LONE_CR = re.compile(r"\r(?!\n)")
_LINE_END = re.compile(r"\r\n|\r|\n")


class TooLarge(ValueError):
    """A statement too large to parse: why, and the line it starts on."""

    def __init__(self, reason: str, line: int) -> None:
        super().__init__(reason)
        self.reason, self.line = reason, line


def more_tokens(text: str, limit: int, start: int = 0, end: Optional[int] = None) -> bool:
    """Whether text[start:end] holds more than `limit` tokens; counts no further than that."""
    end = len(text) if end is None else end
    if end - start <= limit:
        return False
    for count, _ in enumerate(_TOKEN.finditer(text, start, end), 1):
        if count > limit:
            return True
    return False


def check_lines(source: str, limit: Optional[int] = None) -> None:
    """Raise TooLarge when a line, with the indented lines that follow it, holds more than
    `limit` tokens (LINE_TOKENS): text CPython's parser would be given as part of one
    statement, found without parsing."""
    limit = LINE_TOKENS if limit is None else limit
    if len(source) <= limit:
        return  # nearly every file: a token is at least a character
    start = 0
    flush = _FLUSH_CR if _LONE_CR.search(source) else _FLUSH
    for match in flush.finditer(source):
        if match.end() - start > limit:
            _check(source, start, match.end(), limit)
        start = match.end()
    _check(source, start, len(source), limit)


def _check(source: str, start: int, end: int, limit: int) -> None:
    if more_tokens(source, limit, start, end):
        ends = [at for at in (source.find("\n", start, end), source.find("\r", start, end)) if at >= 0]
        what = "a line" if not ends or min(ends) >= end - 2 else "a statement"
        line = len(_LINE_END.findall(source, 0, start)) + 1
        raise TooLarge(_reason(what, end - start, limit), line)


def check_statement(text: str, line: int, limit: Optional[int] = None) -> None:
    """Raise TooLarge when `text`, one top-level statement starting at `line`, holds more than
    `limit` tokens (STATEMENT_TOKENS) for LibCST."""
    limit = STATEMENT_TOKENS if limit is None else limit
    if more_tokens(text, limit):
        raise TooLarge(_reason("a statement", len(text), limit), line)


def _reason(what: str, size: int, limit: int) -> str:
    return f"too large to analyse ({what} of {_size(size)}, over {limit:,} tokens; the limit is {limit:,} tokens)"


def _size(characters: int) -> str:
    if characters >= 1 << 20:
        return f"{characters / (1 << 20):,.1f} MB"
    return f"{characters / 1024:,.0f} KB"
