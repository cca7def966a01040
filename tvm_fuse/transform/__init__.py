"""Relax passes of our own, one pass per file."""
