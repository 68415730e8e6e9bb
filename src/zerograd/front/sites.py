"""Where things are: every event, call and definition the analysis may report gets a site id,
located on demand from its own node, whatever decorators, chunks or callers surround it.

The module may come in chunks of top-level statements parsed one by one, each with the number of
lines before it and the first line of each of its top-level statements: a site is then located
within its own top-level statement only, which keeps LibCST's recursive position pass away from
deeply nested code elsewhere in the file.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Optional

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider

from ..analysis.model import Span
from .indentation import Indents, written_span

KEEP_STATEMENTS = 64  # top-level statements whose sites' positions are kept


Located = tuple[dict[cst.CSTNode, CodeRange], int]  # positions of sites in a statement, and its first line there


@dataclass(frozen=True)
class Chunk:
    module: cst.Module
    offset: int = 0  # lines of the file before it
    starts: tuple[int, ...] = ()  # first line (in the file) of each top-level statement, decorators included
    # Positions met before in this very tree, by statement (engine.Trees: a tree that outlives
    # one lint keeps them, and its nodes are the same sites at the next).
    known: Optional[dict[int, Located]] = None
    # The lines LibCST read re-indented (indentation.py: tabs mixed with spaces), with their
    # indentation as written: the columns reported are those of the lines as written.
    indents: Optional[Indents] = None


@dataclass
class Sites:
    chunks: list[Chunk]
    nodes: list[cst.CSTNode] = field(default_factory=list)
    chunk: int = 0  # where nodes being registered now live
    top: int = 0
    # Each node's chunk and top-level statement, as machine ints (a tuple per site took 72 bytes).
    _chunks: array[int] = field(default_factory=lambda: array("i"))
    _tops: array[int] = field(default_factory=lambda: array("i"))
    _ids: dict[int, int] = field(default_factory=dict)
    _positions: dict[tuple[int, int], tuple[dict[cst.CSTNode, CodeRange], int]] = field(default_factory=dict)

    def site(self, node: cst.CSTNode) -> int:
        known = self._ids.get(id(node))
        if known is None:
            known = self._ids[id(node)] = len(self.nodes)
            self.nodes.append(node)
            self._chunks.append(self.chunk)
            self._tops.append(self.top)
        return known

    def node(self, site: int) -> cst.CSTNode:
        return self.nodes[site]

    def text(self, site: int) -> str:
        """The code of the site's node, as written."""
        return self.chunks[self._chunks[site]].module.code_for_node(self.nodes[site])

    def locate(self, site: int) -> Span:
        node, chunk_index, top = self.nodes[site], self._chunks[site], self._tops[site]
        chunk = self.chunks[chunk_index]
        key = (chunk_index, top if chunk.starts else -1)
        if key not in self._positions or node not in self._positions[key][0]:
            # Only the sites' positions are kept, of the last statements located (findings come
            # scope by scope): those of every node of every statement took 2 KB per line of a
            # file where every function holds a finding.
            if len(self._positions) >= KEEP_STATEMENTS:
                del self._positions[next(iter(self._positions))]
            mine, first = self._located(chunk, key[1], node)
            self._positions[key] = (mine, _shift(chunk, top, first))
        positions, shift = self._positions[key]
        where = positions[node]
        span = Span(where.start.line + shift, where.start.column, where.end.line + shift, where.end.column)
        return span if chunk.indents is None else written_span(span, chunk.indents, chunk.offset)

    def _located(self, chunk: Chunk, top: int, node: cst.CSTNode) -> Located:
        """The positions of the sites of statement `top`, and its first line (_positions_of)."""
        known = chunk.known.get(top) if chunk.known is not None else None
        if known is not None and node in known[0]:
            return known
        positions, first = _positions_of(chunk, top)
        found = {n: r for n, r in positions.items() if id(n) in self._ids}, first
        if chunk.known is not None:
            chunk.known[top] = found
        return found


def _shift(chunk: Chunk, top: int, first: int) -> int:
    """What turns a line counted from `first` in the tree located into a line of the file."""
    return chunk.offset if first == 0 else chunk.starts[top] - first


def _positions_of(chunk: Chunk, top: int) -> Located:
    """The positions of the nodes of statement `top` (of the whole chunk when its statements
    are not known), and the line its first node starts on there (0: the chunk's own lines)."""
    if not chunk.starts or len(chunk.starts) != len(chunk.module.body):
        wrapper = MetadataWrapper(chunk.module, unsafe_skip_copy=True)
        return dict(wrapper.resolve(PositionProvider)), 0
    statement = chunk.module.body[top]
    alone = chunk.module.with_changes(body=[statement], header=[], footer=[])
    positions = dict(MetadataWrapper(alone, unsafe_skip_copy=True).resolve(PositionProvider))
    # `starts` holds the first line of the statement as CPython counts it: its first decorator.
    # LibCST's range of a decorated definition starts at `def`/`class`, so measure from the
    # decorator too, or every position inside would be early by the decorators' height.
    decorated = isinstance(statement, (cst.FunctionDef, cst.ClassDef)) and statement.decorators
    first = statement.decorators[0] if decorated else statement  # type: ignore[union-attr]
    return positions, positions[first].start.line
