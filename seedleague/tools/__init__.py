"""Command-line tools for game teams: a fake host (`seedleague fake-host`) and a
worker conformance checker (`seedleague check-worker`). Neither needs a model or jax.
"""
