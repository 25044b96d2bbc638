"""The env protocol seen from Python: specs, errors, the codec and the worker client.

Only `codec` touches protobuf types; everything else sees numpy arrays and the
dataclasses defined in `specs`.
"""
