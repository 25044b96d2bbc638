"""The env protocol seen from Python: specs, errors, the codec and the worker client.

Only `codec` (v1's messages) and `codec_v2` (v2's) touch protobuf types. The host side sees one
representation, the named tensors and heads of `named.py`: v2's messages decode to it as they are,
v1's through the adapter in `codec` (one tensor "observation", one head "action"). The worker SDK is
`client` (v1: one tensor in, one action array out, the dataclasses of `specs`) and `client_v2`
(named tensors and action heads).
"""
