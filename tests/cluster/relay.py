"""A TCP relay for the network-namespace tests (tests/cluster/netns.py):
``python relay.py LISTEN_HOST:PORT[,PORT…] CONNECT_HOST [SOURCE_HOST]`` accepts on each
port and copies both ways to the same port on ``CONNECT_HOST`` (from ``SOURCE_HOST``
when given). Run inside a namespace it makes the host's loopback services (Redis, Kafka,
whose advertised address is 127.0.0.1) answer at the same addresses there, through the
namespace's link, where the test drops traffic.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def _serve(listen: str, port: int, target: str, source: str | None) -> asyncio.Server:
    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream = await asyncio.open_connection(
                target, port, local_addr=(source, 0) if source else None
            )
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, upstream[1]), _pipe(upstream[0], writer))

    return await asyncio.start_server(relay, listen, port)


async def main(listen: str, ports: list[int], target: str, source: str | None) -> None:
    servers = [await _serve(listen, port, target, source) for port in ports]
    print("relaying", flush=True)
    await asyncio.gather(*(server.serve_forever() for server in servers))


if __name__ == "__main__":
    host, _, ports = sys.argv[1].rpartition(":")
    asyncio.run(
        main(
            host,
            [int(port) for port in ports.split(",")],
            sys.argv[2],
            sys.argv[3] if len(sys.argv) > 3 else None,
        )
    )
