"""Running the app: uvicorn in the foreground (``medqa serve``) or in a background thread (tests, benchmarks)."""
from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Any, Iterator

from ..records import MedQAError
from .settings import ServeSettings


def uvicorn_config(app: Any, settings: ServeSettings, **overrides: Any):
    import uvicorn

    kw: dict = dict(
        host=settings.host, port=settings.port,
        access_log=False,  # medqa.access writes a structured line per request instead (no bodies, no queries)
        server_header=False, proxy_headers=False, timeout_graceful_shutdown=10,
        h11_max_incomplete_event_size=16 * 1024,
    )
    kw.update(overrides)
    return uvicorn.Config(app, **kw)


def serve_forever(app: Any, settings: ServeSettings) -> None:
    import uvicorn

    settings.check_bind()
    try:
        uvicorn.Server(uvicorn_config(app, settings)).run()
    except OSError as e:  # pragma: no cover - depends on the host
        raise MedQAError(f"cannot listen on {settings.host}:{settings.port}: {e.strerror or e}; "
                         "pick another --port or stop the process using it") from e


def free_socket(host: str = "127.0.0.1") -> socket.socket:
    """A listening-ready socket bound to a free port (handed to uvicorn, so there is no port race)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    return sock


@contextlib.contextmanager
def serve_in_thread(app: Any, host: str = "127.0.0.1", startup_timeout: float = 120.0,
                    **config: Any) -> Iterator[str]:
    """Run ``app`` on a free loopback port in a daemon thread; yields the base URL (``http://127.0.0.1:PORT``)."""
    import uvicorn

    sock = free_socket(host)
    port = sock.getsockname()[1]
    settings = ServeSettings(host=host, port=port)
    server = uvicorn.Server(uvicorn_config(app, settings, log_config=None, **config))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("uvicorn exited during startup (see the log above)")
        if time.monotonic() > deadline:
            raise RuntimeError(f"uvicorn did not start within {startup_timeout} s")
        time.sleep(0.02)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
