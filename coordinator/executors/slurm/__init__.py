"""The second executor: every start is a held Slurm job released onto the nodes the core
chose (docs/slurm.md)."""
