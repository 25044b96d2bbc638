"""Test doubles for seedleague services: a fake host that answers random legal
actions (`fakes.FakeBackend`) and a background-thread gRPC server to run any
backend on a real socket (`server_thread.ServerThread`). No model, no GPU.
"""
