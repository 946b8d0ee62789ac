"""Okapi BM25 in pure Python: text relevance where SQLite FTS5 is not there (PostgreSQL, no store at all).

Why not the ``rank_bm25`` package (installable, 0.2.2 from 2022): thirty lines do not justify a dependency,
and its ``BM25Okapi`` floors the idf of a term found in more than half the documents at a small epsilon, so
in a library of a few documents a query word shared by most of them stops counting. This uses Lucene's idf,
``ln(1 + (N − n + ½)/(n + ½))``, always positive, with the usual k1 = 1.2, b = 0.75. (SQLite's FTS5 ``bm25()``
floors such terms too; with tens of skills that touches only words like "policy" or "reward".)

``tokenize`` is shared with the FTS5 query builder so both backends see the same words: lowercase runs of
letters and digits (``entropy_collapse`` → ``entropy``, ``collapse``), short stop words dropped.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

STOP = frozenset(
    "a an and are as at be but by for from has have if in into is it its no not of on or so than that the their "
    "then there these this to too was were when which while with without".split()
)


def tokenize(text: str) -> list[str]:
    return [t for t in re.findall(r"[a-z0-9]+", text.lower()) if len(t) > 1 and t not in STOP]


class BM25:
    """Score a query against a fixed list of documents (each a string)."""

    def __init__(self, documents: Sequence[str], k1: float = 1.2, b: float = 0.75):
        self.k1, self.b = k1, b
        self.docs = [Counter(tokenize(d)) for d in documents]
        self.lengths = [sum(c.values()) for c in self.docs]
        self.avg = (sum(self.lengths) / len(self.docs)) if self.docs else 0.0
        df: Counter[str] = Counter()
        for c in self.docs:
            df.update(c.keys())
        n = len(self.docs)
        self.idf = {t: math.log(1 + (n - k + 0.5) / (k + 0.5)) for t, k in df.items()}

    def scores(self, query: str) -> list[float]:
        terms = tokenize(query)
        out = []
        for c, length in zip(self.docs, self.lengths):
            s = 0.0
            norm = self.k1 * (1 - self.b + self.b * length / self.avg) if self.avg else self.k1
            for t in terms:
                f = c.get(t, 0)
                if f:
                    s += self.idf[t] * f * (self.k1 + 1) / (f + norm)
            out.append(s)
        return out
