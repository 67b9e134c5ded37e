"""A TCP relay for the network-namespace tests (tests/cluster/netns.py):
``python relay.py LISTEN_HOST:PORT[,PORT…] CONNECT_HOST [--source HOST] [--delay-ms D]``
accepts on each port and copies both ways to the same port on ``CONNECT_HOST`` (from
``--source`` when given), each chunk ``D`` ms after it was read (order kept). Run inside
a namespace it makes the host's loopback services (Redis, Kafka, whose advertised
address is 127.0.0.1) answer at the same addresses there, through the namespace's link,
where the test drops traffic, and with ``--delay-ms`` as far away as a network hop.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """Copy ``reader`` to ``writer``, each chunk ``delay`` seconds after it was read."""
    due: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def send() -> None:
        while True:
            at, data = await due.get()
            if not data:
                return
            if (wait := at - time.monotonic()) > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()

    sender = asyncio.create_task(send())
    try:
        while data := await reader.read(65536):
            due.put_nowait((time.monotonic() + delay, data))
        due.put_nowait((0.0, b""))
        await sender
    except (ConnectionError, OSError):
        sender.cancel()
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def _serve(
    listen: str, port: int, target: str, source: str | None, delay: float
) -> asyncio.Server:
    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream = await asyncio.open_connection(
                target, port, local_addr=(source, 0) if source else None
            )
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, upstream[1], delay), _pipe(upstream[0], writer, delay))

    return await asyncio.start_server(relay, listen, port)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("listen")
    parser.add_argument("target")
    parser.add_argument("--source")
    parser.add_argument("--delay-ms", type=float, default=0.0)
    args = parser.parse_args()
    host, _, ports = args.listen.rpartition(":")
    delay = args.delay_ms / 1000
    servers = [
        await _serve(host, int(port), args.target, args.source, delay) for port in ports.split(",")
    ]
    print("relaying", flush=True)
    await asyncio.gather(*(server.serve_forever() for server in servers))


if __name__ == "__main__":
    asyncio.run(main())
