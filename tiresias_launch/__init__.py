"""Runtime that lives inside every Tiresias job process (see docs/contracts.md)."""

EXIT_CHECKPOINTED = 75  # "checkpointed for preemption, resume me" (EX_TEMPFAIL)
