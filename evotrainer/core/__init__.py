"""The bottom layer: errors, names, safe YAML, atomic writes, the home, processes, the symptom registry, the
domain nouns, a job's record (RunMeta), tracking conventions and small text search. Imports nothing of the
project above it, so every other layer may use it.
"""
