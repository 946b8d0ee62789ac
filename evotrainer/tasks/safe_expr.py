"""A tiny, safe parser and exact evaluator for arithmetic expressions written by the policy.

Completions are untrusted text produced by a model being optimised to get reward, so they must never reach
``eval``, ``exec`` or ``ast``. This module is a hand-written tokenizer and recursive-descent parser for
integers with ``+ - * /``, unary minus and parentheses (``−``, ``×`` and ``÷`` are accepted as aliases),
evaluated exactly with :class:`fractions.Fraction`. Hard limits on input length, nesting depth and literal
size keep the cost of a hostile completion bounded; every violation is an :class:`ExprError`.

Grammar (``*`` and ``/`` bind tighter than ``+`` and ``-``; all binary operators are left-associative)::

    expr    := term (("+" | "-") term)*
    term    := unary (("*" | "/") unary)*
    unary   := "-" unary | primary
    primary := NUMBER | "(" expr ")"
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

MAX_CHARS = 200
"""Longest accepted input, in characters (surrounding whitespace included)."""

MAX_DEPTH = 32
"""Deepest accepted nesting of parentheses and unary minus signs, counted together."""

MAX_DIGITS = 12
"""Most digits in one number literal."""

_ALIASES = {"\u2212": "-", "\u00d7": "*", "\u00f7": "/"}  # − × ÷
_OPERATORS = frozenset("+-*/()")
_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}


class ExprError(ValueError):
    """The text is not a valid expression, breaks a limit, or divides by zero."""


@dataclass(frozen=True, slots=True)
class Num:
    """A non-negative integer literal."""

    value: int


@dataclass(frozen=True, slots=True)
class Neg:
    """Unary minus."""

    operand: Expr


@dataclass(frozen=True, slots=True)
class BinOp:
    """A binary operation; ``op`` is one of ``+ - * /``."""

    op: str
    left: Expr
    right: Expr


Expr = Num | Neg | BinOp


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # "num" or an operator character
    text: str
    pos: int


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    i, n = 0, len(text)
    while i < n:
        ch = _ALIASES.get(text[i], text[i])
        if ch in " \t\r\n":
            i += 1
        elif "0" <= ch <= "9":
            start = i
            while i < n and "0" <= text[i] <= "9":
                i += 1
            if i - start > MAX_DIGITS:
                raise ExprError(
                    f"number literal at position {start} has {i - start} digits; "
                    f"at most {MAX_DIGITS} are allowed"
                )
            tokens.append(_Token("num", text[start:i], start))
        elif ch in _OPERATORS:
            if ch == "*" and i + 1 < n and _ALIASES.get(text[i + 1], text[i + 1]) == "*":
                raise ExprError(
                    f"'**' (power) at position {i} is not allowed; only + - * / and parentheses are"
                )
            tokens.append(_Token(ch, ch, i))
            i += 1
        else:
            raise ExprError(
                f"unexpected character {text[i]!r} at position {i}; "
                "only digits, + - * /, parentheses and spaces are allowed"
            )
    return tokens


class _Parser:
    def __init__(self, tokens: list[_Token]) -> None:
        self.tokens = tokens
        self.i = 0
        self.depth = 0

    def peek(self) -> _Token | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def where(self) -> str:
        tok = self.peek()
        return f"{tok.text!r} at position {tok.pos}" if tok else "end of input"

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ExprError(f"expression nests deeper than {MAX_DEPTH} levels (parentheses and unary minus)")

    def expr(self) -> Expr:
        node = self.term()
        while (tok := self.peek()) is not None and tok.kind in "+-":
            self.i += 1
            node = BinOp(tok.kind, node, self.term())
        return node

    def term(self) -> Expr:
        node = self.unary()
        while (tok := self.peek()) is not None and tok.kind in "*/":
            self.i += 1
            node = BinOp(tok.kind, node, self.unary())
        return node

    def unary(self) -> Expr:
        tok = self.peek()
        if tok is not None and tok.kind == "-":
            self.i += 1
            self.enter()
            node = Neg(self.unary())
            self.depth -= 1
            return node
        return self.primary()

    def primary(self) -> Expr:
        tok = self.peek()
        if tok is None:
            raise ExprError("expression ends where a number or '(' was expected")
        if tok.kind == "num":
            self.i += 1
            return Num(int(tok.text))
        if tok.kind == "(":
            self.i += 1
            self.enter()
            node = self.expr()
            close = self.peek()
            if close is None or close.kind != ")":
                raise ExprError(f"missing ')' for the '(' at position {tok.pos}; found {self.where()}")
            self.i += 1
            self.depth -= 1
            return node
        raise ExprError(f"expected a number or '(' but found {self.where()}")


def parse(text: str) -> Expr:
    """Parse ``text`` into an immutable expression tree, or raise :class:`ExprError` saying what is wrong."""
    if not isinstance(text, str):
        raise ExprError(f"expression must be a string, not {type(text).__name__}")
    if len(text) > MAX_CHARS:
        raise ExprError(f"expression is {len(text)} characters long; at most {MAX_CHARS} are allowed")
    tokens = _tokenize(text)
    if not tokens:
        raise ExprError("expression is empty")
    parser = _Parser(tokens)
    node = parser.expr()
    if parser.peek() is not None:
        raise ExprError(f"unexpected {parser.where()} after a complete expression")
    return node


def evaluate(expr: Expr) -> Fraction:
    """The exact value of ``expr``; raises :class:`ExprError` on division by zero."""
    if isinstance(expr, Num):
        return Fraction(expr.value)
    if isinstance(expr, Neg):
        return -evaluate(expr.operand)
    left, right = evaluate(expr.left), evaluate(expr.right)
    if expr.op == "+":
        return left + right
    if expr.op == "-":
        return left - right
    if expr.op == "*":
        return left * right
    if right == 0:
        raise ExprError("division by zero")
    return left / right


def literals(expr: Expr) -> list[int]:
    """The number literals of ``expr``, left to right (the sign of a unary minus is not part of a literal)."""
    if isinstance(expr, Num):
        return [expr.value]
    if isinstance(expr, Neg):
        return literals(expr.operand)
    return literals(expr.left) + literals(expr.right)


def to_text(expr: Expr) -> str:
    """Render ``expr`` without spaces and with only the parentheses its *value* needs.

    ``a+(b-c)`` is rendered ``a+b-c`` and ``a*(b/c)`` as ``a*b/c`` (equal in exact arithmetic), while
    ``a-(b+c)`` and ``a/(b*c)`` keep theirs. ``evaluate(parse(to_text(e))) == evaluate(e)`` always holds.
    """
    if isinstance(expr, Num):
        return str(expr.value)
    if isinstance(expr, Neg):
        inner = to_text(expr.operand)
        return f"-({inner})" if isinstance(expr.operand, BinOp) else f"-{inner}"
    prec = _PRECEDENCE[expr.op]
    left = to_text(expr.left)
    if isinstance(expr.left, BinOp) and _PRECEDENCE[expr.left.op] < prec:
        left = f"({left})"
    right = to_text(expr.right)
    if isinstance(expr.right, Neg) or (
        isinstance(expr.right, BinOp)
        and (_PRECEDENCE[expr.right.op] < prec or (_PRECEDENCE[expr.right.op] == prec and expr.op in "-/"))
    ):
        right = f"({right})"
    return f"{left}{expr.op}{right}"
