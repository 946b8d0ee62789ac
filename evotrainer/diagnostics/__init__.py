"""Rollout diagnostics: versioned analyzers over evidence, promotion gates, and revisions.

- ``symptoms``: the shared vocabulary (diagnostics, gates, proposals and skills all speak it).
- ``base``: the Diagnostic contract and the Finding schema.
- ``builtin``: the built-in analyzers, each documented with the signal it reads and its literature.
- ``registry``: built-ins + user files named in the harness (trusted in-process, untrusted sandboxed).
- ``gates``: diagnostics a branch must pass before promotion.
- ``revision``: replay a revised diagnostic over a labelled archive; accept only if it is better.
- ``sandbox``: the separate, limited process untrusted diagnostic code runs in.
"""
