"""The provider's network on asyncio's own transports (memora_plugin_openai.net): what httpcore2
expects of a network stream — data in order and whole, EOF, timeouts, errors, TLS, flow
control, cancellation — against real servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
import struct
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import httpcore2
import httpx2
import pytest

from memora_plugin_openai import pool
from memora_plugin_openai.net import AsyncioBackend, AsyncioStream

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def serve(handler: Handler, ssl_context: ssl.SSLContext | None = None) -> asyncio.Server:
    async def guarded(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(guarded, "127.0.0.1", 0, ssl=ssl_context)


def port_of(server: asyncio.Server) -> int:
    return int(server.sockets[0].getsockname()[1])


async def connect(server: asyncio.Server) -> httpcore2.AsyncNetworkStream:
    return await AsyncioBackend().connect_tcp("127.0.0.1", port_of(server), timeout=5)


async def read_all(stream: httpcore2.AsyncNetworkStream, max_bytes: int = 65536) -> bytes:
    parts = []
    while chunk := await stream.read(max_bytes, timeout=5):
        assert len(chunk) <= max_bytes
        parts.append(chunk)
    return b"".join(parts)


async def test_the_provider_client_streams_on_asyncio_transports() -> None:
    """A client on the provider's transport (``pool.transport_for``) reads its answers through
    the asyncio backend: every byte of a chunked answer, and its connection kept for the next
    request."""
    body = b"".join(f"data: {i}\n\n".encode() for i in range(500))
    accepted = 0

    async def http(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted
        accepted += 1
        for _ in range(2):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            for i in range(0, len(body), 700):
                piece = body[i : i + 700]
                writer.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                await writer.drain()
            writer.write(b"0\r\n\r\n")
            await writer.drain()

    server = await serve(http)
    transport = pool.transport_for(http2=False, max_connections=10, max_keepalive_connections=5)
    client = httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port_of(server)}", transport=transport)
    try:
        for _ in range(2):
            async with client.stream("GET", "/") as response:
                assert isinstance(response.extensions["network_stream"], AsyncioStream)
                assert b"".join([c async for c in response.aiter_bytes()]) == body
        assert accepted == 1
    finally:
        await client.aclose()
        server.close()


async def test_data_in_order_split_by_max_bytes_and_eof() -> None:
    """What arrives in many writes comes out whole and in order, never more than ``max_bytes``
    a read; the server's close is ``b""`` (what httpcore2 reads as the end)."""
    sent = bytes(range(256)) * 4000  # ~1 MB

    async def send(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for i in range(0, len(sent), 3333):
            writer.write(sent[i : i + 3333])
        await writer.drain()

    server = await serve(send)
    stream = await connect(server)
    try:
        assert await read_all(stream, max_bytes=1000) == sent
        assert await stream.read(1000, timeout=1) == b""  # and again
    finally:
        await stream.aclose()
        server.close()


async def test_a_slow_reader_holds_the_server_back() -> None:
    """Flow control: a reader that reads nothing for a while does not buffer the server's whole
    answer (the connection stops reading, the server's writes wait), and every byte arrives
    once it reads."""
    sent = b"x" * (64 * 1024 * 1024)
    finished = asyncio.Event()

    async def flood(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(sent)
        await writer.drain()
        finished.set()

    server = await serve(flood)
    stream = await connect(server)
    try:
        await asyncio.sleep(0.5)
        assert not finished.is_set()  # 64 MB do not fit in the buffers between us
        got = 0
        while chunk := await stream.read(65536, timeout=5):
            got += len(chunk)
        assert got == len(sent)
        assert finished.is_set()
    finally:
        await stream.aclose()
        server.close()


async def test_a_read_times_out_and_a_read_without_timeout_waits() -> None:
    """A read that gets nothing within its timeout fails with ``ReadTimeout``; the timer it
    armed does not end a later read that has no timeout, nor one with a longer timeout."""
    release = asyncio.Event()

    async def late(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"first")
        await release.wait()
        writer.write(b"second")
        await asyncio.sleep(0.6)
        writer.write(b"third")
        await writer.drain()
        await asyncio.sleep(5)

    server = await serve(late)
    stream = await connect(server)
    try:
        assert await stream.read(100, timeout=0.3) == b"first"
        started = time.monotonic()
        with pytest.raises(httpcore2.ReadTimeout):
            await stream.read(100, timeout=0.3)
        assert 0.25 < time.monotonic() - started < 2
        # armed at 0.2 s from now by this read, which then waits without a deadline
        loop = asyncio.get_running_loop()
        loop.call_later(0.5, release.set)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.05):
                await stream.read(100, timeout=0.2)
        assert await stream.read(100, timeout=None) == b"second"
        assert await stream.read(100, timeout=3) == b"third"  # past the earlier deadlines
    finally:
        await stream.aclose()
        server.close()


async def test_a_cancelled_read_loses_nothing() -> None:
    """A read cancelled while it waits (a turn aborted) leaves the connection as it was: the
    next read gets what arrives."""
    go = asyncio.Event()

    async def later(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await go.wait()
        writer.write(b"payload")
        await writer.drain()
        await asyncio.sleep(1)

    server = await serve(later)
    stream = await connect(server)
    try:
        task = asyncio.ensure_future(stream.read(100, timeout=5))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        go.set()
        assert await stream.read(100, timeout=5) == b"payload"
    finally:
        await stream.aclose()
        server.close()


async def test_a_reset_is_a_read_error_after_what_came_before() -> None:
    """A connection the server resets: what arrived before is read first, then ``ReadError``."""

    async def reset_hard(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        writer.write(b"partial")
        await writer.drain()
        await asyncio.sleep(0.1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()  # closed with linger 0: a reset

    server = await serve(reset_hard)
    stream = await connect(server)
    try:
        assert await stream.read(100, timeout=5) == b"partial"
        with pytest.raises(httpcore2.ReadError):
            await stream.read(100, timeout=5)
        with pytest.raises(httpcore2.WriteError):
            await stream.write(b"more", timeout=1)
    finally:
        await stream.aclose()
        server.close()


async def test_connecting_where_nothing_listens_is_a_connect_error() -> None:
    server = await serve(lambda r, w: asyncio.sleep(0))
    port = port_of(server)
    server.close()
    await server.wait_closed()
    with pytest.raises(httpcore2.ConnectError):
        await AsyncioBackend().connect_tcp("127.0.0.1", port, timeout=5)


async def test_a_server_that_reads_nothing_times_a_write_out() -> None:
    """Writes wait for the socket to drain; one that cannot within its timeout fails with
    ``WriteTimeout`` (a request body to a server that stopped reading)."""
    stop = asyncio.Event()

    async def deaf(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.transport.pause_reading()
        await stop.wait()

    server = await serve(deaf)
    stream = await connect(server)
    try:
        with pytest.raises(httpcore2.WriteTimeout):
            for _ in range(1000):
                await stream.write(b"y" * (1024 * 1024), timeout=0.3)
    finally:
        stop.set()
        await stream.aclose()
        server.close()


async def test_is_readable_tells_an_idle_connection_the_server_closed() -> None:
    async def close_soon(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(0.1)

    server = await serve(close_soon)
    stream = await connect(server)
    try:
        assert stream.get_extra_info("is_readable") is False
        assert stream.get_extra_info("server_addr")[1] == port_of(server)
        assert stream.get_extra_info("client_addr")[0] == "127.0.0.1"
        await asyncio.sleep(0.3)
        assert stream.get_extra_info("is_readable") is True
    finally:
        await stream.aclose()
        server.close()


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (openssl, from the machine)."""
    openssl = shutil.which("openssl")
    if openssl is None:  # pragma: no cover - the machine image has it
        pytest.skip("openssl is not installed")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1",
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


@pytest.fixture
async def https(certificate: tuple[Path, Path]) -> AsyncIterator[tuple[int, Path]]:
    cert, key = certificate
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    body = "你好 memora ".encode() * 20000

    async def http(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            await writer.drain()

    server = await serve(http, context)
    yield port_of(server), cert
    server.close()


async def test_tls_through_the_provider_client(https: tuple[int, Path]) -> None:
    """HTTPS on the asyncio backend: the certificate checked against the client's trust, the
    whole body read (twice, on one kept connection), the TLS object shown to httpcore2."""
    port, cert = https
    trust = ssl.create_default_context(cafile=str(cert))
    client = httpx2.AsyncClient(transport=pool.AsyncioTransport(verify=trust))
    try:
        for _ in range(2):
            async with client.stream("GET", f"https://127.0.0.1:{port}/") as response:
                stream = response.extensions["network_stream"]
                assert isinstance(stream, AsyncioStream)
                assert stream.get_extra_info("ssl_object") is not None
                text = (await response.aread()).decode()
                assert text.startswith("你好 memora ") and len(text) == len("你好 memora ") * 20000
    finally:
        await client.aclose()


async def test_tls_with_an_untrusted_certificate_is_a_connect_error(
    https: tuple[int, Path],
) -> None:
    port, _cert = https
    # the system's trust: the test's certificate is not in it
    client = httpx2.AsyncClient(transport=pool.AsyncioTransport())
    try:
        with pytest.raises(httpx2.ConnectError):
            await client.get(f"https://127.0.0.1:{port}/")
    finally:
        await client.aclose()


async def test_the_idle_check_sees_a_close_the_loop_has_not_read_yet() -> None:
    """The pool's idle check of many connections is one ``poll`` of them all; it still sees a
    close that reached the socket while the event loop was busy (not yet read by the loop), on
    the connection it happened to, and on no other."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    accepted: list[socket.socket] = []
    close_now = threading.Event()

    def accept() -> None:
        for _ in range(3):
            accepted.append(listener.accept()[0])
        close_now.wait(10)
        accepted[1].close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    backend = AsyncioBackend()
    streams = [await backend.connect_tcp("127.0.0.1", port, timeout=5) for _ in range(3)]
    try:
        for _ in range(200):
            if len(accepted) == 3:
                break
            await asyncio.sleep(0.01)
        assert [s.get_extra_info("is_readable") for s in streams] == [False, False, False]
        close_now.set()
        thread.join(5)
        time.sleep(0.05)  # the event loop is held: the close is in the kernel, not yet read
        assert [s.get_extra_info("is_readable") for s in streams] == [False, True, False]
    finally:
        for s in streams:
            await s.aclose()
        for conn in accepted:
            conn.close()
        listener.close()


async def test_two_tasks_reading_one_connection_is_refused() -> None:
    """httpcore2 reads a connection from one task at a time; a second reader is a bug, told at
    once (as anyio does), not a reader that would never be woken."""
    server = await serve(lambda r, w: asyncio.sleep(1))
    stream = await connect(server)
    try:
        first = asyncio.ensure_future(stream.read(10, timeout=5))
        await asyncio.sleep(0.05)
        with pytest.raises(RuntimeError, match="already reading"):
            await stream.read(10, timeout=5)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
    finally:
        await stream.aclose()
        server.close()


async def test_http2_streams_share_one_connection() -> None:
    """HTTP/2 (the provider's ``http2`` option) on the asyncio network: ten concurrent requests
    multiplexed on one connection, each answer whole — httpcore2's HTTP/2 reads and writes one
    connection from many tasks, one at a time."""
    h2_connection = pytest.importorskip("h2.connection")
    import h2.config
    import h2.events

    connections = 0

    async def h2_server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        conn = h2_connection.H2Connection(h2.config.H2Configuration(client_side=False))
        conn.initiate_connection()
        writer.write(conn.data_to_send())
        while data := await reader.read(65536):
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.RequestReceived):
                    path = dict(event.headers)[b":path"].decode()
                    body = f"{path} 你好 ".encode() * 200
                    conn.send_headers(
                        event.stream_id, [(":status", "200"), ("content-length", str(len(body)))]
                    )
                    conn.send_data(event.stream_id, body, end_stream=True)
            writer.write(conn.data_to_send())
            await writer.drain()

    server = await serve(h2_server)
    client = httpx2.AsyncClient(transport=pool.AsyncioTransport(http1=False, http2=True))
    try:
        base = f"http://127.0.0.1:{port_of(server)}"
        responses = await asyncio.gather(*(client.get(f"{base}/r{i}") for i in range(10)))
        for i, response in enumerate(responses):
            assert response.http_version == "HTTP/2"
            assert response.content == f"/r{i} 你好 ".encode() * 200
        assert connections == 1
    finally:
        await client.aclose()
        server.close()


async def test_the_provider_transport_raises_httpx2s_errors() -> None:
    """The transport speaks to httpcore2's pool itself, so it maps httpcore2's errors to
    httpx2's as httpx2's own transport does (the provider classifies httpx2's): a refused
    connection, a body that stops past the read timeout, a connection cut mid-body."""
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]

    async def stall_or_cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
        await writer.drain()
        if b"/stall" in head:
            await asyncio.sleep(2)

    server = await serve(stall_or_cut)
    client = httpx2.AsyncClient(
        transport=pool.AsyncioTransport(), timeout=httpx2.Timeout(5, read=0.2)
    )
    base = f"http://127.0.0.1:{port_of(server)}"
    try:
        with pytest.raises(httpx2.ConnectError):
            await client.get(f"http://127.0.0.1:{closed_port}/")
        with pytest.raises(httpx2.ReadTimeout):
            await client.get(f"{base}/stall")
        with pytest.raises(httpx2.RemoteProtocolError):
            await client.get(f"{base}/cut")
    finally:
        await client.aclose()
        server.close()


def test_the_plugin_reaches_no_private_part_of_httpx2_or_httpcore2() -> None:
    """No import of a private module or name of another library (``httpcore2._backends``):
    what the provider builds on is httpx2's and httpcore2's public API, so an upgrade that
    moves their insides cannot quietly change how it connects."""
    import ast

    import memora_plugin_openai

    found = []
    for path in sorted(Path(memora_plugin_openai.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            found += [
                f"{path.name}:{node.lineno}: {name}"
                for name in names
                if not name.startswith("memora")
                and any(part.startswith("_") and part != "__future__" for part in name.split("."))
            ]
    assert found == []
