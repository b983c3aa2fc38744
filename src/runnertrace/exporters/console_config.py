"""The ``trace.console`` section (kept apart from the backend so config loads without OTel)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

__all__ = ["ConsoleConfig"]


class ConsoleConfig(BaseModel):
    """How the ``console`` backend prints: a compact tree per trace, or the raw OTel JSON."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    format: Literal["tree", "json"] = "tree"
    """``tree``: one compact span tree per finished trace, like ``runnertrace show``."""
