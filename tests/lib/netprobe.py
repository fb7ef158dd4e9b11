"""One TCP connection attempt, and how it went: "open", "refused",
"timeout" or "error-ERRNO". The network tests call connect() from the host
(or a namespace) and copy this file into guests as their probe:

    python3 probe.py IP PORT [TIMEOUT_S]
"""
import socket
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


def script():
    """This file's text: the probe a guest runs."""
    with open(__file__) as f:
        return f.read()


if __name__ == "__main__":
    print(connect(sys.argv[1], sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else 2.0))
