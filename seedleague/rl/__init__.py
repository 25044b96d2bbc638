"""Learning maths and models: networks, V-trace, losses and the learner update.

Pure functions of arrays; no threads, sockets or files. The host (seedleague.host)
calls into this package and holds all state.
"""
