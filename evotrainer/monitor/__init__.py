"""Watching runs while they train: ``watch`` over any run directory, and the TRL callback that diagnoses
inside a user's own trainer.
"""
