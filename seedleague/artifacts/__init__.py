"""Trained artifacts: what a run hands over, below both `seedleague.host` and `seedleague.eval`.

    networks.py     the network a spec and a NetworkConfig build (what a host trains, what a policy answers with)
    policy.py       PolicySpec, Policy (one network over one observation array) and `sample_legal`, the one
                    function that samples a legal action from a policy's probabilities
    named.py        NamedPolicy: a protocol v2 network (named observations, one action per head)
    mixture.py      PolicyMixture and its weights: a strategy over whole games, one member per episode
    load.py         reading policies out of checkpoints and league snapshots (orbax through seedleague.checkpoint,
                    the one module that restores checkpoints)
    run_files.py    what a run directory holds as far as its file names tell (no jax): the refusals a command line
                    gets before jax loads, in the loading path's words
    run_output.py   what a run's output is: its recorded `--output` config and its members

Nothing here imports the host, the evaluation, the league's services or a command-line module; the public face
is `seedleague.api`, and `seedleague.output` resolves a run's output from what is on disk.
"""
