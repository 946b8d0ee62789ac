"""The statistics a campaign decides with: the backtest rule (sequential looks, alpha spending, futility)
and the offline screening of changes on recorded rollouts.
"""
