"""The campaign meta-agent (LangGraph): state / nodes / graph wiring, brains, the catalog, the driver.

- ``spec``: the campaign YAML (budget, backtest, autonomy, brain, stop rules).
- ``schemas``: the entities nodes pass around and the store keeps.
- ``state`` / ``nodes`` / ``graph``: the StateGraph, split as in the LangGraph templates.
- ``brains``: ``heuristic`` (offline, Thompson sampling over the catalog) and ``llm`` (any OpenAI-compatible
  endpoint, validated, falling back to the heuristic).
- ``catalog``: the built-in interventions from the GRPO literature.
- ``campaign``: start / resume / stop / rollback.
"""
