"""Who may talk to the viewer: the Host check against DNS rebinding, and the access token.

Every request goes over real HTTP to a real viewer on a free port; the
client always connects to 127.0.0.1 and sets the Host header a browser
would send for the name in its address bar.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

PATHS = ["/", "/static/app.js", "/api/runs", "/api/trajectories?run=x", "/api/file?run=x&name=config.yaml"]


def port_of(viewer) -> int:
    return urlsplit(viewer.url).port


def local(viewer, path: str = "/") -> str:
    """`path` on the viewer, reached through 127.0.0.1 whatever address it is bound to."""
    return f"http://127.0.0.1:{port_of(viewer)}{path}"


# ------------------------------------------------------------------ Host check on a loopback bind


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1:{port}",
        "localhost:{port}",
        "[::1]:{port}",
        "127.0.0.1",
        "localhost",
        "[::1]",
        "LocalHost:{port}",
        "localhost:9000",  # an SSH tunnel (-L 9000:127.0.0.1:PORT) changes the port the browser sees
    ],
)
def test_a_loopback_viewer_answers_loopback_host_names(serve, record_root: Path, host: str) -> None:
    viewer = serve(record_root)
    assert viewer.token is None
    assert viewer.url == f"http://127.0.0.1:{port_of(viewer)}/"
    response = httpx.get(
        local(viewer, "/api/runs"), headers={"Host": host.format(port=port_of(viewer))}, timeout=30
    )
    assert response.status_code == 200, response.text
    assert {r["experiment"] for r in response.json()["runs"]} == {"calc", "long"}


@pytest.mark.parametrize(
    "host",
    [
        "evil.example",
        "evil.example:{port}",
        "127.0.0.1.evil.example:{port}",
        "localhost.evil.example",
        "sub.localhost:{port}",
        "127.0.0.1:{port}.evil.example",
        "localhost:{port}@evil.example",
        "[::1].evil.example",
        "::1",
        "127.0.0.1:",
        "127.0.0.1:http",
        "0.0.0.0:{port}",
        "10.1.2.3:{port}",
        "127.0.0.2:{port}",
        "[::ffff:127.0.0.1]:{port}",
        "",
    ],
)
def test_a_loopback_viewer_refuses_other_host_names(serve, record_root: Path, host: str) -> None:
    viewer = serve(record_root)
    for path in PATHS:
        response = httpx.get(
            local(viewer, path), headers={"Host": host.format(port=port_of(viewer))}, timeout=30
        )
        assert response.status_code == 403, (path, response.text)
        assert response.headers["content-type"].startswith("text/plain")
        assert response.headers["x-content-type-options"] == "nosniff"
        assert "Host" in response.text and len(response.text) < 200
        assert "calc" not in response.text and "Traceback" not in response.text


def test_a_request_without_a_host_header_is_refused(serve, record_root: Path) -> None:
    viewer = serve(record_root)
    with socket.create_connection(("127.0.0.1", port_of(viewer)), timeout=30) as conn:
        conn.sendall(b"GET /api/runs HTTP/1.0\r\n\r\n")
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 403"), answer[:200]
    assert b"calc" not in answer


# ------------------------------------------------------------------ the access token


def test_a_network_bind_without_a_token_gets_a_generated_one(serve, record_root: Path) -> None:
    viewer = serve(record_root, host="0.0.0.0")
    assert viewer.token and len(viewer.token) >= 32
    assert viewer.url == f"http://0.0.0.0:{port_of(viewer)}/?token={viewer.token}"
    assert serve(record_root, host="0.0.0.0").token != viewer.token
    for path in PATHS:
        response = httpx.get(local(viewer, path), timeout=30)
        assert response.status_code == 401, (path, response.text)
        assert response.headers["content-type"].startswith("text/plain")
        assert "token" in response.text and "calc" not in response.text
    # Any Host is accepted once the token is right: the viewer is meant to be reached by other names.
    bearer = {"Authorization": f"Bearer {viewer.token}", "Host": f"gpu-box.internal:{port_of(viewer)}"}
    response = httpx.get(local(viewer, "/api/runs"), headers=bearer, timeout=30)
    assert response.status_code == 200, response.text
    assert {r["experiment"] for r in response.json()["runs"]} == {"calc", "long"}
    query = httpx.get(local(viewer, "/api/runs"), params={"token": viewer.token}, timeout=30)
    assert query.status_code == 200


@pytest.mark.parametrize(
    "credentials",
    [
        {"headers": {"Authorization": "Bearer wrong"}},
        {"headers": {"Authorization": "Basic d3Jvbmc6d3Jvbmc="}},
        {"headers": {"Authorization": "Bearer"}},
        {"params": {"token": ""}},
        {"params": {"token": "wrong"}},
        {"params": {"token": "the-right-token-0123456789abcdefX"}},
        {"cookies": {"astuner-logview-token-{port}": "wrong"}},
        {"cookies": {"astuner-logview-token-1": "the-right-token-0123456789abcdef"}},  # another viewer's
    ],
    ids=[
        "wrong-bearer",
        "basic",
        "empty-bearer",
        "empty-query",
        "wrong-query",
        "longer",
        "wrong-cookie",
        "port",
    ],
)
def test_a_wrong_token_is_refused(serve, record_root: Path, credentials: dict) -> None:
    viewer = serve(record_root, host="0.0.0.0", token="the-right-token-0123456789abcdef")
    if "cookies" in credentials:
        credentials = {
            "cookies": {k.format(port=port_of(viewer)): v for k, v in credentials["cookies"].items()}
        }
    response = httpx.get(local(viewer, "/api/runs"), timeout=30, **credentials)
    assert response.status_code == 401
    assert "calc" not in response.text
    assert "set-cookie" not in response.headers


def test_the_token_link_sets_a_cookie_and_leaves_the_address_bar(serve, record_root: Path) -> None:
    viewer = serve(record_root, host="0.0.0.0", token="s3cret-token-for-this-test-only")
    assert viewer.url.endswith("/?token=s3cret-token-for-this-test-only")
    with httpx.Client(timeout=30) as browser:
        first = browser.get(local(viewer, "/?token=s3cret-token-for-this-test-only"))
        assert first.status_code == 303
        assert first.headers["location"] == "/"  # the secret does not stay in the address bar or history
        cookie = first.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/" in cookie
        page = browser.get(local(viewer, first.headers["location"]))
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert f"astuner-logview-token-{port_of(viewer)}" in browser.cookies
        runs = browser.get(local(viewer, "/api/runs"))  # what the page's scripts do: cookie only
        assert runs.status_code == 200
        assert {r["experiment"] for r in runs.json()["runs"]} == {"calc", "long"}
        assert browser.get(local(viewer, "/static/app.js")).status_code == 200
    # Other query parameters survive the redirect; only the token goes.
    kept = httpx.get(local(viewer, "/?a=1&token=s3cret-token-for-this-test-only&b=2"), timeout=30)
    assert kept.status_code == 303 and kept.headers["location"] == "/?a=1&b=2"


def test_a_token_given_for_a_loopback_bind_is_required_too(serve, record_root: Path) -> None:
    viewer = serve(record_root, token="local-but-shared-machine-token")
    assert viewer.url == f"http://127.0.0.1:{port_of(viewer)}/?token=local-but-shared-machine-token"
    assert httpx.get(local(viewer, "/api/runs"), timeout=30).status_code == 401
    bearer = {"Authorization": "Bearer local-but-shared-machine-token"}
    assert httpx.get(local(viewer, "/api/runs"), headers=bearer, timeout=30).status_code == 200
    # The Host check still applies: a token is no excuse for a rebinding name.
    evil = {**bearer, "Host": f"evil.example:{port_of(viewer)}"}
    assert httpx.get(local(viewer, "/api/runs"), headers=evil, timeout=30).status_code == 403


# ------------------------------------------------------------------ the command


def run_command(
    record_root: Path, *args: str, token_env: str | None = None
) -> tuple[subprocess.Popen, list[str]]:
    """Start `astuner logview` in a subprocess; return it and its output up to the `open` line.

    `ASTUNER_LOGVIEW_TOKEN` is set to `token_env`, or unset when that is None.
    """
    env = {k: v for k, v in os.environ.items() if k != "ASTUNER_LOGVIEW_TOKEN"}
    env["ASTUNER_LOAD_PLUGINS"] = "logview"  # the installed plugin, through its entry point, and no other
    if token_env is not None:
        env["ASTUNER_LOGVIEW_TOKEN"] = token_env
    script = textwrap.dedent(
        """
        import sys
        from astuner.cli import make_app
        from astuner.plugins import Plugins

        make_app(Plugins())(["logview", *sys.argv[1:]])
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(record_root), "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if "open http://" in line:
            break
    return proc, lines


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_the_command_has_a_token_option() -> None:
    from logview_records import logview_plugins
    from typer.testing import CliRunner

    from astuner.cli import make_app

    result = CliRunner().invoke(make_app(logview_plugins()), ["logview", "--help"])
    assert result.exit_code == 0
    assert "--token" in result.output and "ASTUNER_LOGVIEW_TOKEN" in result.output


@pytest.mark.slow
def test_the_command_on_a_network_address_prints_a_link_with_a_new_token(record_root: Path) -> None:
    proc, lines = run_command(record_root, "--host", "0.0.0.0")
    try:
        assert proc.poll() is None, lines
        url = lines[-1].split("open ", 1)[1].split()[0]
        base, token = url.split("/?token=")
        assert base.startswith("http://0.0.0.0:") and len(token) >= 32
        assert any("token" in line for line in lines[:-1]), lines
        port = base.rsplit(":", 1)[1]
        assert httpx.get(f"http://127.0.0.1:{port}/api/runs", timeout=30).status_code == 401
        answer = httpx.get(f"http://127.0.0.1:{port}/api/runs", params={"token": token}, timeout=30)
        assert {r["experiment"] for r in answer.json()["runs"]} == {"calc", "long"}
    finally:
        stop(proc)


@pytest.mark.slow
def test_the_command_takes_the_token_from_the_environment(record_root: Path) -> None:
    token = "token-from-the-environment-0123456789"
    proc, lines = run_command(record_root, "--host", "0.0.0.0", token_env=token)
    try:
        assert proc.poll() is None, lines
        url = lines[-1].split("open ", 1)[1].split()[0]
        assert url.endswith(f"/?token={token}")
        port = url.split("/?token=")[0].rsplit(":", 1)[1]
        bearer = {"Authorization": f"Bearer {token}"}
        assert httpx.get(f"http://127.0.0.1:{port}/api/runs", headers=bearer, timeout=30).status_code == 200
        assert httpx.get(f"http://127.0.0.1:{port}/api/runs", timeout=30).status_code == 401
    finally:
        stop(proc)


@pytest.mark.slow
def test_the_command_on_loopback_needs_no_token(record_root: Path) -> None:
    proc, lines = run_command(record_root, token_env="")  # set but empty: no token
    try:
        assert proc.poll() is None, lines
        url = lines[-1].split("open ", 1)[1].split()[0]
        assert url.startswith("http://127.0.0.1:") and "token" not in url
        assert httpx.get(url + "api/runs", timeout=30).status_code == 200
    finally:
        stop(proc)
