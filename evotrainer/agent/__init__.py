"""The campaign meta-agent (LangGraph): state / nodes / graph wiring, brains, lessons, revisions, the driver.

- ``spec``: the campaign YAML (budget, backtest, autonomy, brain, stop rules).
- ``schemas``: the entities nodes pass around and the store keeps.
- ``state`` / ``nodes`` / ``graph``: the StateGraph, split as in the LangGraph templates.
- ``brains``: ``heuristic`` (offline, Thompson sampling over the library's skills) and ``llm`` (any
  OpenAI-compatible endpoint, validated, falling back to the heuristic).
- ``lessons``: the skill library in a campaign (candidates, known mistakes, curation after each decision).
- ``revise``: labelling decided branches and revising diagnostics that misfired.
- ``campaign``: start / resume / stop / rollback.
"""
