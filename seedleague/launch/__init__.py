"""Launchers: start the league service, the hosts and the env workers (on this machine: `local`, `league`,
`probe`; on a Ray cluster: `ray_cluster`) and stop them all together (`child`).

What a worker command line may rely on, whichever command starts it (`seedleague train --worker-cmd`,
`seedleague check-worker`, `seedleague exploit`): ADDRESS_PLACEHOLDER in its arguments is replaced by the host's
host:port, and ADDRESS_ENV in its environment holds the same.
"""

ADDRESS_PLACEHOLDER = "{address}"
ADDRESS_ENV = "SEEDLEAGUE_ADDRESS"
