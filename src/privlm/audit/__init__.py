"""Attacks and audits that measure leakage empirically."""
