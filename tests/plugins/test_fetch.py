"""memora-plugin-fetch against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import importlib
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import pytest

from memora.errors import ToolError, ToolErrorCode
from memora.plugins import create_plugin_manager
from memora_plugin_fetch import HttpFetcher
from tests.loopback import QuietHTTPServer

ARTICLE = (
    "<html><head><title>记忆测试</title></head><body><nav>Home | About | Login</nav>"
    "<article><h1>长期记忆</h1>"
    + "<p>"
    + "记忆是由摘要组成的，每一轮问答之后写入一条摘要。" * 8
    + "</p>"
    + "<p>Memory is made of round summaries written after each question and answer.</p>"
    "</article><footer>© footer links</footer></body></html>"
)


NEWS = (
    "<html><head><title>Kernel news</title>"
    '<meta name="author" content="Ada Lovelace">'
    '<meta property="article:published_time" content="2026-11-02T08:00:00Z">'
    "</head><body><nav>menu menu menu</nav><article><h1>Kernel news</h1>"
    "<h2>What changed</h2>"
    + "<p>The turn is now an explicit step machine with typed records and gates.</p>"
    * 6
    + "<ul><li>first point</li><li>second point</li></ul>"
    "</article></body></html>"
)
GBK_PAGE = (
    '<html><head><meta charset="gbk"><title>编码</title></head><body><article><p>'
    + "这是一段用国标编码写成的中文文字，用来检查字符集识别。" * 10
    + "</p></article></body></html>"
)


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def _send(
        self, status: int, body: bytes, ctype: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/article":
            self._send(200, ARTICLE.encode(), "text/html; charset=utf-8")
        elif self.path == "/news":
            self._send(200, NEWS.encode(), "text/html; charset=utf-8")
        elif self.path == "/gbk":
            self._send(200, GBK_PAGE.encode("gb18030"), "text/html")
        elif self.path == "/gbk-undeclared":
            body = ("纯文本，没有声明字符集。" * 20).encode("gb18030")
            self._send(200, body, "text/plain")
        elif self.path == "/json":
            self._send(
                200, b'{"name":"\xe8\xae\xb0\xe5\xbf\x86","items":[1,2]}', "application/json"
            )
        elif self.path == "/pdf":
            self._send(200, b"%PDF-1.7\n%binary", "application/pdf")
        elif self.path == "/pdf-as-text":
            self._send(200, b"%PDF-1.4\n1 0 obj", "text/plain")
        elif self.path == "/plain":
            self._send(200, "纯文本 plain".encode(), "text/plain; charset=utf-8")
        elif self.path == "/big":
            self._send(200, b"x" * 300_000, "text/plain")
        elif self.path == "/binary":
            self._send(200, b"\x89PNG\r\n" + b"\0" * 100, "image/png")
        elif self.path == "/missing":
            self._send(404, b"nope", "text/plain")
        elif self.path == "/busy":
            self._send(429, b"slow down", "text/plain")
        elif self.path == "/redirect":
            self._send(302, b"", "text/plain", {"Location": "/plain"})
        elif self.path == "/loop":
            self._send(302, b"", "text/plain", {"Location": "/loop"})
        elif self.path == "/stall":
            time.sleep(3)
            self._send(200, b"late", "text/plain")
        elif self.path == "/to-metadata":
            self._send(302, b"", "text/plain", {"Location": "http://169.254.169.254/latest/"})
        elif self.path == "/host":
            self._send(200, (self.headers.get("Host") or "").encode(), "text/plain")
        elif self.path == "/trickle":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", "1000")
            self.end_headers()
            for _ in range(100):  # one byte every 0.1 s: no single read ever times out
                try:
                    self.wfile.write(b"x")
                    self.wfile.flush()
                except OSError:
                    return
                time.sleep(0.1)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = QuietHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module", autouse=True)
def _extractors_loaded() -> None:
    """trafilatura and charset_normalizer imported before the first fetch: these fetches have 1 s
    in all (so a stalled server is cut quickly), and the first extraction's import took longer
    than that on a busy 2-core machine with the suite on both cores."""
    importlib.import_module("trafilatura")
    importlib.import_module("charset_normalizer")


@pytest.fixture
async def fetcher() -> HttpFetcher:
    f = HttpFetcher(allow_private=True, timeout=1.0, max_bytes=100_000, max_redirects=3)
    yield f  # type: ignore[misc]
    await f.aclose()


async def test_html_main_text_extracted(server: str, fetcher: HttpFetcher) -> None:
    result = await fetcher.fetch(f"{server}/article")
    assert result.status == 200 and result.content_type == "text/html"
    assert "每一轮问答之后写入一条摘要" in result.text
    assert "round summaries" in result.text
    assert "Login" not in result.text and "footer" not in result.text
    assert not result.truncated


async def test_plain_text_and_redirect(server: str, fetcher: HttpFetcher) -> None:
    result = await fetcher.fetch(f"{server}/redirect")
    assert result.text == "纯文本 plain"
    assert result.url.endswith("/plain")


async def test_caps(server: str, fetcher: HttpFetcher) -> None:
    result = await fetcher.fetch(f"{server}/big", max_chars=1000)
    assert len(result.text) == 1000 and result.truncated
    result = await fetcher.fetch(f"{server}/big", max_chars=10**9)
    assert len(result.text) == 100_000 and result.truncated


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("/binary", ToolErrorCode.NOT_AVAILABLE),
        ("/missing", ToolErrorCode.FILE_NOT_FOUND),
        ("/busy", ToolErrorCode.RATE_LIMITED),
        ("/loop", ToolErrorCode.NETWORK_ERROR),
        ("/stall", ToolErrorCode.TIMEOUT),
    ],
)
async def test_failures_have_codes(server: str, fetcher: HttpFetcher, path: str, code: str) -> None:
    with pytest.raises(ToolError) as info:
        await fetcher.fetch(f"{server}{path}")
    assert info.value.code == code


async def test_private_addresses_refused_by_default(server: str) -> None:
    fetcher = HttpFetcher(timeout=1.0)
    try:
        with pytest.raises(ToolError) as info:
            await fetcher.fetch(f"{server}/plain")
        assert info.value.code == ToolErrorCode.PERMISSION_DENIED
        assert "allow_private" in info.value.message
        for url in ("file:///etc/passwd", "ftp://example.org/x", "http:///nohost"):
            with pytest.raises(ToolError) as info:
                await fetcher.fetch(url)
            assert info.value.code == ToolErrorCode.INVALID_ARGS
    finally:
        await fetcher.aclose()


async def test_created_through_plugin_manager(server: str) -> None:
    plugins = create_plugin_manager()
    fetcher = plugins.create("web_fetch", "fetch", {"allow_private": True, "timeout": 2})
    try:
        assert (await fetcher.fetch(f"{server}/plain")).text == "纯文本 plain"
    finally:
        await fetcher.aclose()
    from memora.errors import PluginError

    with pytest.raises(PluginError, match="unknown fetch option"):
        plugins.create("web_fetch", "fetch", {"bogus": 1})


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.0.0.1",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "224.0.0.1",
        "0.0.0.0",
        "::1",
        "fe80::1",
        "fc00::1",
        "::ffff:127.0.0.1",
        "::127.0.0.1",
        "64:ff9b::a9fe:a9fe",
        "2002:a00:1::1",
        "2001:0:4136:e378:8000:63bf:80ff:fefe",
    ],
)
async def test_every_internal_address_form_is_refused(address: str) -> None:
    from memora.security.network import AddressPolicy

    async def resolver(host: str, port: int) -> list[str]:
        return [address]

    with pytest.raises(ToolError) as info:
        await AddressPolicy(resolver=resolver).judge("http://innocent.example/")
    import ipaddress

    assert info.value.code == ToolErrorCode.PERMISSION_DENIED
    assert str(ipaddress.ip_address(address)) in str(info.value)


async def test_public_addresses_pass_and_one_bad_answer_refuses_all() -> None:
    from memora.security.network import AddressPolicy

    async def resolver(host: str, port: int) -> list[str]:
        return ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"] + (
            ["10.0.0.5"] if host == "mixed.example" else []
        )

    policy = AddressPolicy(resolver=resolver)
    target = await policy.judge("https://public.example:8443/a?b=1")
    assert target.address == "93.184.216.34"
    assert target.connect_url == "https://93.184.216.34:8443/a?b=1"
    assert target.host_header == "public.example:8443"
    with pytest.raises(ToolError, match="10.0.0.5"):
        await policy.judge("http://mixed.example/")


async def test_the_connection_goes_to_the_judged_address(server: str) -> None:
    """DNS rebinding: the name is resolved once, judged, and that very address is connected to;
    the server sees the original Host header."""
    port = server.rsplit(":", 1)[1]
    answers = iter([["127.0.0.1"], ["10.66.66.66"]])  # a second lookup would get another answer

    async def rebinding(host: str, port_: int) -> list[str]:
        return next(answers)

    f = HttpFetcher(allow=["127.0.0.1/32"], resolver=rebinding, timeout=2.0)
    try:
        result = await f.fetch(f"http://rebind.example:{port}/host")
        assert result.text == f"rebind.example:{port}"
    finally:
        await f.aclose()


async def test_a_redirect_to_an_internal_address_is_refused(server: str) -> None:
    f = HttpFetcher(allow=["127.0.0.1/32"], timeout=2.0)
    try:
        with pytest.raises(ToolError) as info:
            await f.fetch(f"{server}/to-metadata")
        assert info.value.code == ToolErrorCode.PERMISSION_DENIED
        assert "169.254.169.254" in info.value.message
    finally:
        await f.aclose()


async def test_a_trickling_body_hits_the_total_deadline(server: str) -> None:
    f = HttpFetcher(allow=["127.0.0.1/32"], timeout=1.0)
    started = time.monotonic()
    try:
        with pytest.raises(ToolError) as info:
            await f.fetch(f"{server}/trickle")
    finally:
        await f.aclose()
    assert info.value.code == ToolErrorCode.TIMEOUT
    assert time.monotonic() - started < 4


@pytest.mark.parametrize(
    "url", ["http://example.org:99999/", "http://[::1/", "http://user:pw@example.org/", "http://"]
)
async def test_malformed_urls_are_clean_tool_errors(url: str) -> None:
    f = HttpFetcher(timeout=1.0)
    try:
        with pytest.raises(ToolError) as info:
            await f.fetch(url)
        assert info.value.code == ToolErrorCode.INVALID_ARGS
    finally:
        await f.aclose()


async def test_article_as_markdown_with_title_author_and_date(
    server: str, fetcher: HttpFetcher
) -> None:
    r = await fetcher.fetch(f"{server}/news")
    assert r.title == "Kernel news"
    assert r.author == "Ada Lovelace"
    assert r.date == "2026-11-02"
    assert "step machine" in r.text and "menu menu" not in r.text
    assert "- first point" in r.text  # Markdown list
    assert "## What changed" in r.text or "What changed" in r.text


async def test_charsets_declared_in_the_page_or_guessed(server: str, fetcher: HttpFetcher) -> None:
    r = await fetcher.fetch(f"{server}/gbk")
    assert "国标编码" in r.text
    r = await fetcher.fetch(f"{server}/gbk-undeclared")
    assert "没有声明字符集" in r.text


async def test_json_is_pretty_printed(server: str, fetcher: HttpFetcher) -> None:
    r = await fetcher.fetch(f"{server}/json")
    assert r.content_type == "application/json"
    assert r.text.splitlines()[1] == '  "name": "记忆",'


@pytest.mark.parametrize("path", ["/pdf", "/pdf-as-text"])
async def test_pdfs_are_refused_clearly(server: str, fetcher: HttpFetcher, path: str) -> None:
    with pytest.raises(ToolError) as info:
        await fetcher.fetch(f"{server}{path}")
    assert info.value.code == ToolErrorCode.NOT_AVAILABLE and "PDF" in info.value.message
