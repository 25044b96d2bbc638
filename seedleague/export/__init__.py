"""Exporting a trained policy for use outside seedleague (in-game inference): `seedleague export`.

`onnx_policy` turns one loaded `seedleague.api.Policy` into an ONNX graph and its JSON sidecar;
`cli` picks what to export from a run directory (its output, or one league snapshot) and writes
the files. See docs/export.md.
"""
