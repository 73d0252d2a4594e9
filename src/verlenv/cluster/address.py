"""A Ray cluster's address as `--ray` takes it, checked before anything starts: `auto` (the cluster this machine
belongs to), HOST:PORT (the head's GCS), or ray://HOST:PORT (Ray Client). A malformed one is one line; one where
nothing listens, or where something that is not a Ray cluster answers, fails within seconds."""

import socket
from dataclasses import dataclass

from verlenv.errors import UserError

AUTO = "auto"
CLIENT = "ray://"
CONNECT_S = 5.0
# HTTP/2's client preface and an empty SETTINGS frame (RFC 9113 3.4, 6.5): Ray's GCS and its client server speak
# gRPC, which answers with a SETTINGS frame of its own; anything else (an HTTP/1 server, a database) does not.
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
H2_SETTINGS = 0x4


@dataclass(frozen=True)
class Address:
    text: str
    host: str | None = None
    port: int | None = None

    @property
    def auto(self) -> bool:
        return self.host is None

    @property
    def client(self) -> bool:
        return self.text.startswith(CLIENT)


def parse(text: str | None) -> Address:
    """`--ray`'s value as an Address, or one line saying what is wrong and what is valid."""
    valid = "give auto, HOST:PORT (the head's GCS, e.g. 10.0.0.1:6379) or ray://HOST:PORT (Ray Client, port 10001)"
    if text is None or text == AUTO:
        return Address(AUTO)
    if not isinstance(text, str) or not text.strip() or text != text.strip():
        raise UserError(f"--ray {text!r}: not an address; {valid}")
    rest = text[len(CLIENT):] if text.startswith(CLIENT) else text
    if "://" in rest:
        raise UserError(f"--ray {text}: unknown scheme; {valid}")
    host, sep, port = rest.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]  # an IPv6 literal
    if not sep or not host or "/" in host or " " in host:
        raise UserError(f"--ray {text}: no HOST:PORT; {valid}")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(f"--ray {text}: port {port!r} is not a number from 1 to 65535; {valid}")
    return Address(text, host, int(port))


def probe(address: Address, timeout: float = CONNECT_S) -> None:
    """Something that speaks gRPC listens at a HOST:PORT address (a Ray head or Ray Client server), or UserError:
    nothing listens (connection refused, no route, timeout), or what answers is not gRPC, so not a Ray cluster."""
    if address.auto:
        return
    try:
        with socket.create_connection((address.host, address.port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(H2_PREFACE)
            reply = _read(sock, 9)
    except OSError as e:
        why = e.strerror or type(e).__name__.replace("Error", " error").strip() or str(e)
        raise UserError(f"--ray {address.text}: nothing answers at {address.host}:{address.port} ({why}); is the "
                        "Ray head running there (`ray status`)?") from None
    if len(reply) < 9 or reply[3] != H2_SETTINGS:
        seen = reply[:16].decode("latin-1").split("\r\n")[0].strip() or "nothing"
        raise UserError(f"--ray {address.text}: what answers at {address.host}:{address.port} is not a Ray cluster "
                        f"(no gRPC; it said {seen!r}); give the head's GCS port (6379 by default) or ray://HOST:10001")


def _read(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        try:
            chunk = sock.recv(size - len(data))
        except socket.timeout:
            break
        if not chunk:
            break
        data += chunk
    return data
