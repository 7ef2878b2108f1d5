"""The first executor: ``tiresias-agent`` on every machine (the node daemon), and the fleet of
them as the coordinator sees it."""
