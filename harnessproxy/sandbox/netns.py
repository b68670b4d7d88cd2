"""A listening socket created inside another process's network namespace.

A short-lived helper thread joins the namespace (setns affects only the calling thread), binds, and exits;
the socket stays bound where it was made. The agent sees the proxy on its own 127.0.0.1 and has no other
route; the host process serves the socket without ever entering the namespace itself."""

from __future__ import annotations

import ctypes
import os
import socket
import threading

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def listen_in_netns(pid: int, host: str = "127.0.0.1", port: int = 0, backlog: int = 128) -> socket.socket:
    result: dict[str, object] = {}

    def make() -> None:
        try:
            fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            try:
                if _libc.setns(fd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns into the network namespace of pid {pid}: {os.strerror(err)}")
            finally:
                os.close(fd)
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(backlog)
            sock.setblocking(False)
            result["sock"] = sock
        except OSError as exc:
            result["error"] = exc

    t = threading.Thread(target=make, name=f"netns-listen-{pid}")
    t.start()
    t.join()
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    return result["sock"]  # type: ignore[return-value]
