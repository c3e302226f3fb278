"""A CONNECT proxy on loopback for the bench's cloud cases (#33 item 5):
`python connectproxy.py PORT_FILE HOST:PORT=127.0.0.1:PORT ...`.

KServe's initializer builds `https://<account>.blob.core.windows.net`
from the URI and has no endpoint variable; both tools honour HTTPS_PROXY,
so both are sent here, and a CONNECT to a mapped authority is tunnelled to
the local TLS origin that holds a certificate for that name (the bench's
CA, trusted by each tool's own variable). Any other authority is refused:
nothing leaves the machine, not even a DNS query. The tunnels are plain
byte relays, one thread each way; the process is billed as the origin.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading

_BUFFER_BYTES = 1 << 20


def _relay(source: socket.socket, sink: socket.socket) -> None:
    buffer = bytearray(_BUFFER_BYTES)
    view = memoryview(buffer)
    try:
        while count := source.recv_into(buffer):
            sink.sendall(view[:count])
    except OSError:
        pass
    finally:
        for sock, how in ((sink, socket.SHUT_WR), (source, socket.SHUT_RD)):
            with contextlib.suppress(OSError):
                sock.shutdown(how)


def _serve(client: socket.socket, routes: dict[str, tuple[str, int]]) -> None:
    head = b""
    while b"\r\n\r\n" not in head:
        piece = client.recv(4096)
        if not piece or len(head) > 65536:
            client.close()
            return
        head += piece
    line = head.split(b"\r\n", 1)[0].decode("latin-1").split()
    target = routes.get(line[1].lower()) if len(line) == 3 and line[0] == "CONNECT" else None
    if target is None:
        client.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        client.close()
        return
    upstream = socket.create_connection(target)
    for sock in (client, upstream):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
    rest = head.split(b"\r\n\r\n", 1)[1]
    if rest:
        upstream.sendall(rest)
    back = threading.Thread(target=_relay, args=(upstream, client), daemon=True)
    back.start()
    _relay(client, upstream)
    back.join()
    client.close()
    upstream.close()


def main(argv: list[str]) -> int:
    port_file, *pairs = argv
    routes = {}
    for pair in pairs:
        authority, _, target = pair.partition("=")
        host, _, port = target.rpartition(":")
        routes[authority.lower()] = (host, int(port))
    listener = socket.create_server(("127.0.0.1", 0), backlog=128)
    with open(port_file + ".tmp", "w") as handle:
        handle.write(str(listener.getsockname()[1]))
    os.replace(port_file + ".tmp", port_file)
    while True:
        client, _ = listener.accept()
        threading.Thread(target=_serve, args=(client, routes), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
