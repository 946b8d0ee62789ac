"""Everything that trains or scores a policy: the built-in policies and pretrained ones, prompting, the
data streams, rewards, multi-turn episodes and evaluation on the held-out splits.
"""
