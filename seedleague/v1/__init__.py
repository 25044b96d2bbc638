"""Generated protobuf and gRPC modules for protocol seedleague.v1 (`make proto`)."""
