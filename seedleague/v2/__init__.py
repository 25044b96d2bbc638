"""Generated protobuf and gRPC modules for protocol seedleague.v2 (`make proto`)."""
