"""The env protocol seen from Python: specs, errors, the codec and the worker client.

Only `codec` (and `codec_v2`, protocol v2's messages) touches protobuf types; everything
else sees numpy arrays and the dataclasses defined in `specs` (and `specs_v2`). The worker
SDK is `client` (v1) and `client_v2` (named tensors and action heads).
"""
