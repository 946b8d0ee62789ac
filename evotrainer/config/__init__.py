"""Every spec a user writes or a command builds: harness, policy, evaluation, job, campaign.

Why one package: these are the boundaries where user input enters (YAML files, CLI flags, an LLM's proposal),
so each is a pydantic model whose fields document and bound every knob, and all of them load without torch,
transformers or the store (``tests/test_layout.py`` asserts it). The heavy modules import from here, never the
other way round.

- :mod:`.harness`: the training-side recipe (GRPO knobs, rewards, data rules, diagnostics), versioned by hash;
- :mod:`.policy`: which policy a job trains (built-in size, built-in pretrained model, local directory);
- :mod:`.eval`: how a job evaluates on held-out problems;
- :mod:`.job`: one job (task, steps, seed, policy, device, evaluation, and the harness itself);
- :mod:`.campaign`: one campaign (budget, backtests, brain, launcher, stop rules).
"""

from evotrainer.config.campaign import CampaignSpec, load_campaign_spec
from evotrainer.config.eval import EvalSpec
from evotrainer.config.harness import HarnessSpec, load_harness
from evotrainer.config.job import JobSpec
from evotrainer.config.policy import PolicySpec

__all__ = ["CampaignSpec", "EvalSpec", "HarnessSpec", "JobSpec", "PolicySpec", "load_campaign_spec", "load_harness"]
