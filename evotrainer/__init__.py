"""EvoTrainer: autonomous RL post-training that diagnoses, backtests and remembers.

The package is organised the way the data flows (see ``shared/DESIGN.md``): tasks make verifiable
problems, the policy is trained by TRL's GRPOTrainer under a harness, and every step leaves evidence in
MLflow and Parquet for later diagnosis.
"""

__version__ = "0.1.0"
