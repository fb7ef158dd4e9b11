"""One TCP connection attempt, and how it went: "open", "refused",
"timeout" or "error-ERRNO"; or one DNS question (A, over UDP or TCP) and
how it went: "answer A.B.C.D", "refused", "timeout", "bad" or
"error-ERRNO". The network tests call connect()/dns() from the host (or a
namespace) and copy this file into guests as their probe:

    python3 probe.py IP PORT [TIMEOUT_S]
    python3 probe.py dns IP PORT [TIMEOUT_S] [udp|tcp]
"""
import socket
import struct
import sys


def connect(ip, port, timeout=2.0):
    s = socket.socket()
    s.settimeout(timeout)
    try:
        s.connect((ip, int(port)))
        return "open"
    except ConnectionRefusedError:
        return "refused"
    except socket.timeout:
        return "timeout"
    except OSError as e:
        return "error-%d" % e.errno
    finally:
        s.close()


def dns(ip, port=53, timeout=2.0, proto="udp", name="example.org"):
    qname = b"".join(bytes([len(p)]) + p for p in name.encode().split(b".")) + b"\0"
    q = struct.pack("!HHHHHH", 0x4c56, 0x0100, 1, 0, 0, 0) + qname + struct.pack("!HH", 1, 1)
    if proto == "tcp":
        s = socket.socket()
    else:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(timeout)
    try:
        if proto == "tcp":
            s.connect((ip, int(port)))
            s.sendall(struct.pack("!H", len(q)) + q)
            r = b""
            while len(r) < 2 or len(r) < 2 + struct.unpack("!H", r[:2])[0]:
                d = s.recv(4096)
                if not d:
                    break
                r += d
            r = r[2:]
        else:
            s.sendto(q, (ip, int(port)))
            r = s.recv(4096)
    except ConnectionRefusedError:
        return "refused"
    except socket.timeout:
        return "timeout"
    except OSError as e:
        return "error-%d" % e.errno
    finally:
        s.close()
    if len(r) < 12 or r[:2] != q[:2] or not r[2] & 0x80:
        return "bad"
    if r[3] & 0x0F == 3:
        return "answer nxdomain"
    an = struct.unpack("!H", r[6:8])[0]
    if an and len(r) >= len(q) + 16:
        return "answer " + socket.inet_ntoa(r[-4:])
    return "answer"


def script():
    """This file's text: the probe a guest runs."""
    with open(__file__) as f:
        return f.read()


if __name__ == "__main__":
    a = sys.argv[1:]
    if a and a[0] == "dns":
        print(dns(a[1], a[2], float(a[3]) if len(a) > 3 else 2.0, a[4] if len(a) > 4 else "udp"))
    else:
        print(connect(a[0], a[1], float(a[2]) if len(a) > 2 else 2.0))
