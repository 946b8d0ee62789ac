"""Wiring only: the campaign StateGraph and its durable checkpointer.

train_segment → diagnose → propose → review → backtest → decide → distill → (train_segment | finish).
Routes live in the nodes' ``Command[Literal[...]]`` signatures; this module just adds the nodes. The
checkpointer is LangGraph's SQLite saver at ``HOME/checkpoints.db`` by default, or Postgres when
``EVOTRAINER_CHECKPOINT_URL`` is a ``postgresql://`` URL (``agent/checkpoints.py``).
"""

from __future__ import annotations

from pathlib import Path

from langgraph.graph import START, StateGraph

from evotrainer.agent import nodes
from evotrainer.agent.checkpoints import checkpointer
from evotrainer.agent.state import CampaignContext, CampaignState


def build_graph():
    g = StateGraph(CampaignState, context_schema=CampaignContext)
    g.add_node("train_segment", nodes.train_segment)
    g.add_node("diagnose", nodes.diagnose)
    g.add_node("propose", nodes.propose)
    g.add_node("review", nodes.review)
    g.add_node("backtest", nodes.backtest)
    g.add_node("decide", nodes.decide_node)
    g.add_node("distill", nodes.distill)
    g.add_node("finish", nodes.finish)
    g.add_edge(START, "train_segment")
    return g


def compile_graph(home: Path):
    return build_graph().compile(checkpointer=checkpointer(home))
