"""The executors behind ``coordinator.service.executor.Executor``: the agent fleet with its node
daemon (``agents``), and Slurm (``slurm``). The lifecycle never imports them; only the
coordinator's composition root picks one."""
