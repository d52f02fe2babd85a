"""A minimal HTTP/2 client on a raw socket, for tests that must put on the wire what no gRPC library sends:
a unary gRPC message declared large and then stalled part-way.

Frames (RFC 9113): the client preface, SETTINGS (acknowledged), HEADERS with HPACK literals (RFC 7541 §6.2.2,
no Huffman, no indexing), DATA within the flow-control windows the server grants (WINDOW_UPDATE), and the
server's frames read and counted; GOAWAY and RST_STREAM are recorded.
"""
import socket
import struct
import time

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0x0, 0x1, 0x3, 0x4, 0x6, 0x7, 0x8
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1


def _int(value, prefix_bits):
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([value])
    out = [limit]
    value -= limit
    while value >= 128:
        out.append((value & 127) | 128)
        value >>= 7
    out.append(value)
    return bytes(out)


def _literal(name, value):
    name, value = name.encode(), value.encode()
    return b"\x00" + _int(len(name), 7) + name + _int(len(value), 7) + value


class Connection:
    """One HTTP/2 connection to a gRPC server; streams are odd ids from 1."""

    def __init__(self, host, port, timeout=10.0):
        self.timeout = timeout
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = b""
        self.next_stream = 1
        self.conn_window = 65535
        self.stream_windows = {}
        self.initial_window = 65535
        self.max_frame = 16384
        self.reset_streams = {}
        self.goaway = None
        self.closed = False
        self.sock.sendall(PREFACE + self._frame(SETTINGS, 0, 0, b""))

    @staticmethod
    def _frame(kind, flags, stream, payload):
        return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload

    def _read_frames(self, wait):
        """Reads what the server sent within `wait` seconds and handles it."""
        self.sock.settimeout(max(wait, 0.0005))
        try:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                self.closed = True
            self.buffer += chunk
        except (socket.timeout, BlockingIOError):
            pass
        except OSError:
            self.closed = True
        self.sock.settimeout(self.timeout)
        while len(self.buffer) >= 9:
            length = struct.unpack(">I", b"\x00" + self.buffer[:3])[0]
            if len(self.buffer) < 9 + length:
                break
            kind, flags = self.buffer[3], self.buffer[4]
            stream = struct.unpack(">I", self.buffer[5:9])[0] & 0x7FFFFFFF
            payload = self.buffer[9 : 9 + length]
            self.buffer = self.buffer[9 + length :]
            self._handle(kind, flags, stream, payload)

    def _handle(self, kind, flags, stream, payload):
        if kind == SETTINGS and not flags & ACK:
            for i in range(0, len(payload), 6):
                ident, value = struct.unpack(">HI", payload[i : i + 6])
                if ident == 0x4:  # INITIAL_WINDOW_SIZE
                    for s in self.stream_windows:
                        self.stream_windows[s] += value - self.initial_window
                    self.initial_window = value
                elif ident == 0x5:
                    self.max_frame = value
            self.sock.sendall(self._frame(SETTINGS, ACK, 0, b""))
        elif kind == WINDOW_UPDATE:
            increment = struct.unpack(">I", payload)[0] & 0x7FFFFFFF
            if stream == 0:
                self.conn_window += increment
            elif stream in self.stream_windows:
                self.stream_windows[stream] += increment
        elif kind == PING and not flags & ACK:
            self.sock.sendall(self._frame(PING, ACK, 0, payload))
        elif kind == RST_STREAM:
            self.reset_streams[stream] = struct.unpack(">I", payload)[0]
            self.stream_windows.pop(stream, None)
        elif kind == GOAWAY:
            self.goaway = struct.unpack(">II", payload[:8])[1]

    def open_grpc(self, path, metadata=()):
        """HEADERS of a gRPC call on a new stream; returns its id."""
        stream = self.next_stream
        self.next_stream += 2
        block = b"".join(
            _literal(k, v)
            for k, v in [(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", "localhost"),
                         ("content-type", "application/grpc"), ("te", "trailers"), *metadata]
        )
        self.sock.sendall(self._frame(HEADERS, END_HEADERS, stream, block))
        self.stream_windows[stream] = self.initial_window
        return stream

    def send_message_part(self, stream, declared, send, deadline_s=30.0):
        """Sends the 5-byte gRPC prefix declaring `declared` bytes, then `send` bytes of it (never END_STREAM).
        Returns the bytes of the message sent (less when the server stopped granting window or reset)."""
        data = b"\x00" + struct.pack(">I", declared)
        sent = -5
        end = time.time() + deadline_s
        while sent < send and time.time() < end and not self.closed:
            if stream in self.reset_streams or self.goaway is not None:
                break
            room = min(self.conn_window, self.stream_windows.get(stream, 0), self.max_frame)
            if room <= 0:
                self._read_frames(0.05)
                continue
            n = min(room, send - sent) if sent >= 0 else min(room, 5)
            payload = data if sent < 0 else b"\x00" * n
            payload = payload[:n]
            try:
                self.sock.sendall(self._frame(DATA, 0, stream, payload))
            except OSError:
                self.closed = True
                break
            self.conn_window -= len(payload)
            self.stream_windows[stream] -= len(payload)
            sent += len(payload)
            self._read_frames(0)
        return max(sent, 0)

    def pump(self, seconds):
        """Reads and answers the server's frames for `seconds`."""
        end = time.time() + seconds
        while time.time() < end and not self.closed:
            self._read_frames(min(0.1, max(0.001, end - time.time())))

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
