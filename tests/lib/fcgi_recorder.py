#!/usr/bin/python3
"""A FastCGI responder that records what the front end passes on: started
in place of labvm.fcgi by lighttpd (bin-path) or spawn-fcgi (Apache), it
serves on the listening socket it is given as fd 0 (FastCGI spec 2.2), and
for each request appends its parameters as one JSON object to --out and
answers 200 with the same object. t705 swaps it in behind the real front-end
configs to see which request headers reach the API.

    fcgi_recorder.py --out FILE
"""
import argparse
import json
import socket
import struct

BEGIN, ABORT, END, PARAMS, STDIN, STDOUT, GET_VALUES = 1, 2, 3, 4, 5, 6, 9


def read_exact(c, n):
    b = b""
    while len(b) < n:
        x = c.recv(n - len(b))
        if not x:
            raise EOFError
        b += x
    return b


def record(c):
    _v, typ, rid, clen, plen, _r = struct.unpack(">BBHHBB", read_exact(c, 8))
    body = read_exact(c, clen)
    read_exact(c, plen)
    return typ, rid, body


def send(c, typ, rid, body=b""):
    for i in range(0, max(len(body), 1), 65535):
        part = body[i:i + 65535]
        c.sendall(struct.pack(">BBHHBB", 1, typ, rid, len(part), 0, 0) + part)
        if not body:
            break


def pairs(b):
    out, i = {}, 0

    def length():
        nonlocal i
        if b[i] < 128:
            i += 1
            return b[i - 1]
        n = struct.unpack(">I", b[i:i + 4])[0] & 0x7FFFFFFF
        i += 4
        return n
    while i < len(b):
        nl = length()
        vl = length()
        k = b[i:i + nl].decode("latin-1")
        v = b[i + nl:i + nl + vl].decode("latin-1")
        i += nl + vl
        out.setdefault(k, []).append(v)
    return out


def serve(c, out):
    """One connection: requests until the front end closes it."""
    while True:
        params, keep = b"", False
        typ, rid, body = record(c)
        if typ == GET_VALUES:
            send(c, 10, 0)
            continue
        if typ != BEGIN:
            return
        keep = bool(body[2] & 1)
        while True:
            typ, _, body = record(c)
            if typ == PARAMS and body:
                params += body
            elif typ == PARAMS:
                break
            elif typ == ABORT:
                return
        while True:
            typ, _, body = record(c)
            if typ == STDIN and not body:
                break
            if typ == ABORT:
                return
        seen = pairs(params)
        with open(out, "a") as f:
            f.write(json.dumps(seen) + "\n")
        answer = json.dumps(seen).encode()
        send(c, STDOUT, rid, b"Status: 200 OK\r\nContent-Type: application/json\r\n"
             b"Content-Length: " + str(len(answer)).encode() + b"\r\n\r\n" + answer)
        send(c, STDOUT, rid)
        send(c, END, rid, struct.pack(">IB3x", 0, 0))
        if not keep:
            return


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    ls = socket.socket(fileno=0)
    while True:
        c, _ = ls.accept()
        try:
            serve(c, a.out)
        except (EOFError, OSError):
            pass
        finally:
            c.close()


if __name__ == "__main__":
    main()
