"""What a run left behind, whoever made it: the evidence model (per-step metrics under TRL's names,
per-rollout records), the readers of our runs, MLflow, TRL and verl, and the mapping of other tools'
names onto the contract. Above config (a map file is a spec), below training and the diagnostics.
"""
