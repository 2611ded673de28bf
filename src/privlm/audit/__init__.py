"""Attacks and audits that measure leakage empirically."""

DEFAULT_PREFIX = "My ID is "  # the canary's text before its digits (exposure, Carlini et al. 2019)
