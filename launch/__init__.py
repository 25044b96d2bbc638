"""Launchers: start the host and env workers on this machine and stop them all together."""
