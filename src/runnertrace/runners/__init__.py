"""Runners: one per framework, each translating its framework into our event vocabulary.

Only :mod:`runnertrace.runners.native` is importable without extras.
"""
