"""Streams over an upgraded connection. Today the VMI serial console: a
WebSocket (RFC 6455, framing by python3-wsproto) relaying binary frames of
raw bytes to and from the guest's console socket, as virt-api does with
subprotocol plain.kubevirt.io: text frames are ignored, pings answered, a
close echoed with its code; the guest closing its end closes the WebSocket
(1000), and so does another client taking the console over (kick). The
handshake itself is answered by the handler (upgrade_websocket), the
WebSocket key hashed by wsproto.

The place for the other streaming subresources the real API server has
(a pod's exec/attach over the v4/v5.channel.k8s.io subprotocols, where each
frame's first byte is the stream id)."""
import socket
import threading

from wsproto.connection import Connection, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Ping
from wsproto.utilities import LocalProtocolError, generate_accept_token

CONSOLE_PROTO = "plain.kubevirt.io"


def accept_token(key):
    """Sec-WebSocket-Accept for the client's Sec-WebSocket-Key."""
    return generate_accept_token(key.encode()).decode()


def upgrade_websocket(handler, key, protocol=None):
    """Answer the handshake (101) on an http.server handler; the connection
    then belongs to the stream."""
    handler.send_response(101, "Switching Protocols")
    handler.send_header("Upgrade", "websocket")
    handler.send_header("Connection", "Upgrade")
    handler.send_header("Sec-WebSocket-Accept", accept_token(key))
    if protocol:
        handler.send_header("Sec-WebSocket-Protocol", protocol)
    handler.end_headers()
    handler.wfile.flush()
    handler.close_connection = True
    handler.connection.settimeout(None)


class WsSession:
    """One console connection: the WebSocket on handler's connection <-> guest_sock."""

    def __init__(self, handler, guest_sock):
        self.h = handler
        self.sock = handler.connection
        self.rfile = handler.rfile     # may already hold bytes sent after the handshake
        self.guest = guest_sock
        self.ws = Connection(ConnectionType.SERVER)
        self.wlock = threading.Lock()
        self.closed = False

    def send(self, event):
        with self.wlock:
            try:
                data = self.ws.send(event)
            except LocalProtocolError as e:    # the WebSocket is closing already
                raise OSError(str(e)) from None
            self.h.wfile.write(data)
            self.h.wfile.flush()

    def kick(self):
        """Closed because another console connection took over the serial port."""
        if self.closed:
            return
        self.closed = True
        try:
            self.send(CloseConnection(code=1000))
        except OSError:
            pass
        for s in (self.guest,):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def run(self):
        out = threading.Thread(target=self._guest_to_ws, daemon=True)
        out.start()
        try:
            while not self.closed:
                data = self.rfile.read1(65536)
                if not data:
                    break
                self.ws.receive_data(data)
                done = False
                for ev in self.ws.events():
                    if isinstance(ev, BytesMessage):
                        if ev.data:
                            self.guest.sendall(ev.data)
                    elif isinstance(ev, CloseConnection):
                        # echo the code (none if the client gave none); a
                        # protocol error is closed with its code (1002, 1007)
                        try:
                            self.send(CloseConnection(code=ev.code))
                        except OSError:
                            pass
                        done = True
                        break
                    elif isinstance(ev, Ping):
                        self.send(ev.response())
                    # text frames and pongs are ignored
                if done:
                    break
        except (EOFError, OSError, ValueError):
            pass
        finally:
            self.closed = True
            try:
                self.guest.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                self.guest.close()
            except OSError:
                pass
            out.join(2)

    def _guest_to_ws(self):
        try:
            while not self.closed:
                data = self.guest.recv(10240)
                if not data:
                    break
                self.send(BytesMessage(data=data))
        except OSError:
            pass
        if not self.closed:
            self.closed = True
            try:
                self.send(CloseConnection(code=1000))
            except OSError:
                pass
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
