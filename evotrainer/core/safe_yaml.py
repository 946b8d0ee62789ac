"""One safe YAML loader for every YAML file EvoTrainer reads: harnesses, campaign specs, labelled archives and
SKILL.md front matter.

Why not ``yaml.safe_load``: it refuses Python objects, but it still lets a file say something other than what a
reviewer reads, or take the process down. It accepts duplicate keys (the last one silently wins while a reader
sees the first), expands aliases without limit (a "billion laughs" file of 1 KB becomes gigabytes once
validated or hashed), recurses once per nesting level (a deep file ends in ``RecursionError``), reads whatever
bytes it is given (``UnicodeDecodeError``) and converts integers of any length (``ValueError`` past Python's
4,300-digit limit). Here each of those is a refusal, raised as :class:`~evotrainer.core.errors.ConfigError` with the
file's name and, where the parser knows it, the line:

================  ===================  =====================================================================
refusal           limit                why
================  ===================  =====================================================================
file size         ``MAX_BYTES`` (1 MiB) configuration is small; a bigger file is a mistake or an attack
                  (archives: 16 MiB)
bytes             UTF-8 only           the line of the first bad byte, instead of a ``UnicodeDecodeError``
nesting depth     ``MAX_DEPTH`` (64)   checked while composing, before Python's recursion limit is near;
                                       the depth counts through aliases too
aliases           ``MAX_ALIAS_NODES``  nodes that aliases add once expanded (a merge ``<<: *base`` of a
                  (10,000)             small block is fine; an exponential chain is not); a recursive
                                       alias (one that contains itself) is refused
duplicate keys    none allowed         in any mapping, with the lines of both
tags              YAML's own types     ``!!python/...`` and any other application tag: files hold data only
values            convertible          a 50,000-digit integer or an impossible date names its line
================  ===================  =====================================================================

``parse_yaml`` reads text; ``load_yaml_file`` reads a file (size first, then bytes, then text).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from evotrainer.core.errors import ConfigError

MAX_BYTES = 1024 * 1024
MAX_DEPTH = 64
MAX_ALIAS_NODES = 10_000
_MERGE = "tag:yaml.org,2002:merge"
ALLOWED_TAGS = frozenset(f"tag:yaml.org,2002:{t}" for t in ("null", "bool", "int", "float", "str", "timestamp", "seq",
                                                              "map", "merge"))
"""Plain data: YAML's scalars, lists and mappings (and merge keys); not binary, set, omap, pairs or any other tag."""


class _Refused(yaml.MarkedYAMLError):
    """A limit of this loader, raised with the mark where the parser was."""


class _Loader(yaml.SafeLoader):
    """PyYAML's SafeLoader with a depth limit while composing, duplicate-key refusal and value errors as marks."""

    def __init__(self, stream: str, line_offset: int = 0) -> None:
        super().__init__(stream)
        self._depth, self._line_offset = 0, line_offset
        self.alias_marks: list[yaml.Mark] = []

    def compose_node(self, parent: Node | None, index: Any) -> Node:  # noqa: D102 - PyYAML's hook
        if self.check_event(AliasEvent):
            self.alias_marks.append(self.peek_event().start_mark)
            return super().compose_node(parent, index)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Refused(None, None, f"nested deeper than {MAX_DEPTH} levels; flatten the structure",
                               self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_object(self, node: Node, deep: bool = False) -> Any:  # noqa: D102 - PyYAML's hook
        try:
            return super().construct_object(node, deep)
        except (ValueError, OverflowError, TypeError) as err:
            why = str(err).split("; use sys.set_int_max_str_digits")[0]  # Python's advice is not the user's
            raise ConstructorError(None, None, f"cannot read this value: {why}", node.start_mark) from None

    def construct_mapping(self, node: Node, deep: bool = False) -> dict[Any, Any]:  # noqa: D102 - PyYAML's hook
        if isinstance(node, MappingNode):
            seen: dict[Any, yaml.Mark] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE:
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:
                    continue  # an unhashable key: PyYAML's own check names it below
                if first is not None:
                    raise _Refused(None, None, f"duplicate key {key!r} (first given at line {first.line + 1 + self._line_offset}, column "
                                   f"{first.column + 1}); a reader sees the first value while the last one would "
                                   "win: keep one", key_node.start_mark)
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep)


def _check_graph(root: Node, alias_marks: list[yaml.Mark]) -> None:
    """Tags, depth through aliases, recursive aliases and the nodes aliases add, in one pass over the node graph."""
    memo: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded size, height)
    open_: set[int] = set()
    first_alias = alias_marks[0] if alias_marks else None

    def walk(node: Node, depth: int) -> tuple[int, int]:
        key = id(node)
        if key in memo:
            size, height = memo[key]
        else:
            if key in open_:
                raise _Refused(None, None, "an alias refers to a node that contains it (a recursive structure); "
                               "write the value out", node.start_mark)
            if depth > MAX_DEPTH:
                raise _Refused(None, None, f"nested deeper than {MAX_DEPTH} levels once aliases are expanded; "
                               "flatten the structure", first_alias or node.start_mark)
            if node.tag not in ALLOWED_TAGS:
                raise _Refused(None, None, f"tag {node.tag!r} is not allowed: these files hold data only (strings, "
                               "numbers, booleans, null, lists and mappings)", node.start_mark)
            open_.add(key)
            if isinstance(node, ScalarNode):
                children: list[Node] = []
            elif isinstance(node, SequenceNode):
                children = list(node.value)
            else:
                children = [n for pair in node.value for n in pair]
            size, height = 1, 0
            for child in children:
                s, h = walk(child, depth + 1)
                size, height = size + s, max(height, h + 1)
            open_.discard(key)
            memo[key] = (size, height)
        if depth + height > MAX_DEPTH:
            raise _Refused(None, None, f"nested deeper than {MAX_DEPTH} levels once aliases are expanded; flatten "
                           "the structure", first_alias or node.start_mark)
        return size, height

    total, _ = walk(root, 0)
    added = total - len(memo)
    if added > MAX_ALIAS_NODES:
        raise _Refused(None, None, f"aliases expand this document by {added:,} nodes (limit {MAX_ALIAS_NODES:,}); "
                       "write the values out or use fewer aliases", first_alias or root.start_mark)


def _where(mark: yaml.Mark | None, line_offset: int) -> str:
    return f"line {mark.line + 1 + line_offset}, column {mark.column + 1}" if mark is not None else ""


def parse_yaml(text: str, source: str, *, line_offset: int = 0, max_bytes: int = MAX_BYTES) -> Any:
    """The data of one YAML document, or ConfigError naming ``source`` and the line of the refusal.

    ``line_offset`` is added to reported lines (front matter starts after the opening ``---`` line). An empty
    document is ``None``.
    """
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise ConfigError(f"{source}: {size:,} bytes is over the {max_bytes:,}-byte limit for this kind of file")
    loader = None
    try:
        loader = _Loader(text, line_offset)
        node = loader.get_single_node()
        if node is None:
            return None
        _check_graph(node, loader.alias_marks)
        return loader.construct_document(node)
    except _Refused as err:
        raise ConfigError(f"{source}: {_where(err.problem_mark, line_offset)}: {err.problem}") from None
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f" at {_where(mark, line_offset)}" if mark is not None else ""
        what = f"{err.problem} ({err.context})" if err.context and err.problem else (err.problem or err.context)
        raise ConfigError(f"{source}: not valid YAML{where}: {what}") from None
    except yaml.reader.ReaderError as err:
        line = text[: err.position].count("\n") + 1 + line_offset
        code = err.character if isinstance(err.character, int) else ord(str(err.character)[:1] or "?")
        raise ConfigError(f"{source}: not valid YAML at line {line}: character U+{code:04X} is not allowed (control "
                          "characters other than tab, newline and carriage return cannot appear in YAML)") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{source}: not valid YAML: {err}") from None
    except RecursionError:  # a backstop: the depth checks above should make this unreachable
        raise ConfigError(f"{source}: nested too deeply to read; flatten the structure") from None
    finally:
        if loader is not None:
            loader.dispose()


def decode_utf8(data: bytes, source: str, *, line_offset: int = 0) -> str:
    """``data`` as text, or ConfigError naming the line and the first byte that is not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1 + line_offset
        col = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise ConfigError(f"{source}: line {line}, column {col}: byte 0x{data[err.start]:02x} is not UTF-8; save the "
                          "file as UTF-8") from None


def load_yaml_file(path: str | Path, what: str, *, max_bytes: int = MAX_BYTES) -> Any:
    """Read ``path`` (a ``what``: 'harness', 'campaign spec'...) through :func:`parse_yaml`; every failure is a
    ConfigError naming the file."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{what} file not found: {p}")
    try:
        with p.open("rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as err:
        raise ConfigError(f"{p}: cannot read this {what} file: {err.strerror or err}") from None
    if len(data) > max_bytes:
        raise ConfigError(f"{p}: {p.stat().st_size:,} bytes is over the {max_bytes:,}-byte limit for a {what} file")
    return parse_yaml(decode_utf8(data, str(p)), str(p), max_bytes=max_bytes)
