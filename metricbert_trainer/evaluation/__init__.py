"""Judging an encoder on a catalog: encoding, nearest-neighbour ranking, metrics, the evaluators
the trainers call and the scorers (baselines) they are compared with.

Usable standalone or inside training; imports only ``data`` and ``base``'s primitives
(docs/architecture.md).
"""
