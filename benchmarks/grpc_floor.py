"""The floor under a lockstep round trip: Python gRPC alone, with none of seedleague's work on either side.

A worker sends one message and waits for the answer before it sends the next (docs/protocol.md), so its
env steps per second are at most envs per message times round trips per second. This measures the round
trips per second of a bare bidirectional stream of that shape on this machine, as a yardstick for
benchmarks/throughput.py's gRPC rows:

- a server in this process (grpc.aio, as the host's) that answers each message with its first 64 bytes,
  either on its event loop or, with `--handoff`, after a round trip through a second thread (as the host's
  batcher thread does);
- a client in a child process, as a worker is: `sync`, grpc's blocking stream fed by a request iterator (what
  seedleague.protocol.client does), or `aio`, a grpc.aio stream driven one exchange at a time.

    python -m benchmarks.grpc_floor                      # both clients, answered on the loop and via a thread
    python -m benchmarks.grpc_floor --bytes 16384 --clients sync
"""

from __future__ import annotations

import argparse
import asyncio
import queue
import subprocess
import sys
import threading
import time

import grpc

METHOD = "/floor.Echo/Stream"


def serve(handoff: bool) -> int:
    """Start the echo server on a daemon thread; returns its port."""
    ready, ports = threading.Event(), []
    requests: queue.SimpleQueue = queue.SimpleQueue()

    def answer_elsewhere():  # the second thread: answer each message through the loop's future
        while True:
            message, future, loop = requests.get()
            loop.call_soon_threadsafe(future.set_result, message[:64])

    async def stream(request_iterator, context):
        loop = asyncio.get_running_loop()
        while (message := await context.read()) is not grpc.aio.EOF:
            if handoff:
                future = loop.create_future()
                requests.put((message, future, loop))
                answer = await future
            else:
                answer = message[:64]
            await context.write(answer)

    async def main():
        server = grpc.aio.server()
        handler = grpc.method_handlers_generic_handler(
            "floor.Echo", {"Stream": grpc.stream_stream_rpc_method_handler(stream)})
        server.add_generic_rpc_handlers((handler,))
        ports.append(server.add_insecure_port("127.0.0.1:0"))
        await server.start()
        ready.set()
        await server.wait_for_termination()

    threading.Thread(target=answer_elsewhere, daemon=True).start()
    threading.Thread(target=lambda: asyncio.run(main()), daemon=True).start()
    ready.wait()
    return ports[0]


def sync_client(port: int, payload: bytes, round_trips: int, warmup: int) -> float:
    """Round trips/s of grpc's blocking stream fed by a request iterator."""
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    pending: queue.SimpleQueue = queue.SimpleQueue()
    answers = channel.stream_stream(METHOD)(iter(pending.get, None))
    for _ in range(warmup):
        pending.put(payload)
        next(answers)
    start = time.perf_counter()
    for _ in range(round_trips):
        pending.put(payload)
        next(answers)
    seconds = time.perf_counter() - start
    pending.put(None)
    channel.close()
    return round_trips / seconds


def aio_client(port: int, payload: bytes, round_trips: int, warmup: int) -> float:
    """Round trips/s of a grpc.aio stream, each exchange run to completion from plain code."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)

    async def open_call():
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        return channel, channel.stream_stream(METHOD)()

    channel, call = loop.run_until_complete(open_call())

    async def exchange():
        await call.write(payload)
        return await call.read()

    for _ in range(warmup):
        loop.run_until_complete(exchange())
    start = time.perf_counter()
    for _ in range(round_trips):
        loop.run_until_complete(exchange())
    seconds = time.perf_counter() - start
    loop.run_until_complete(call.done_writing())
    loop.run_until_complete(channel.close())
    return round_trips / seconds


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bytes", type=int, default=2048, help="size of each message the client sends")
    parser.add_argument("--round-trips", type=int, default=3000, help="timed round trips per row")
    parser.add_argument("--warmup", type=int, default=200, help="round trips before timing")
    parser.add_argument("--clients", default="sync,aio", help="comma-separated: sync, aio")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each row (all are printed)")
    parser.add_argument("--client-of", type=int, default=0, help=argparse.SUPPRESS)  # internal: be a client of PORT
    parser.add_argument("--kind", default="sync", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.round_trips < 1 or args.warmup < 0 or args.bytes < 1 or args.repeats < 1:
        parser.error("--round-trips, --bytes and --repeats must be >= 1, --warmup >= 0")
    clients = [name.strip() for name in args.clients.split(",") if name.strip()]
    unknown = sorted(set(clients) - {"sync", "aio"})
    if unknown or not clients:
        parser.error(f"--clients takes sync and/or aio, got {args.clients!r}")
    payload = b"x" * args.bytes
    if args.client_of:
        run = sync_client if args.kind == "sync" else aio_client
        print(f"{run(args.client_of, payload, args.round_trips, args.warmup):.0f}", flush=True)
        return 0
    print(f"lockstep echo of {args.bytes} bytes, {args.round_trips} round trips per run, client in a child process\n")
    print("| answered | client | round trips/s (each run) | µs per round trip (median) |")
    print("|---|---|---|---:|")
    for handoff in (False, True):
        port = serve(handoff)
        for kind in clients:
            rates = []
            for _ in range(args.repeats):
                out = subprocess.run([sys.executable, "-m", "benchmarks.grpc_floor", "--client-of", str(port), "--kind",
                                      kind, "--bytes", str(args.bytes), "--round-trips", str(args.round_trips),
                                      "--warmup", str(args.warmup)], capture_output=True, text=True, check=True)
                rates.append(float(out.stdout.split()[-1]))
            median = sorted(rates)[len(rates) // 2]
            where = "via a second thread" if handoff else "on the event loop"
            print(f"| {where} | {kind} | {', '.join(f'{r:,.0f}' for r in rates)} | {1e6 / median:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
