"""Runtime that lives inside every Tiresias job process (see docs/contracts.md)."""

from tiresias_launch.contract import EXIT_CHECKPOINTED

__all__ = ["EXIT_CHECKPOINTED"]
